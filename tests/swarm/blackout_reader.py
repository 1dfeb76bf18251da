"""A reader whose clock runs behind (issue 23's shard blackout), run as its own process by test_blackout.py.

    python blackout_reader.py SHARD HONEST_HEX MADDR...

Reads one announcement shard in three phases and prints, as JSON, how many reads held the honest sender and
how many the attacker: hivemind's whole-value validation with the clock 3 s behind (the control), then our
node's sub-record validation with the clock 3 s and 30 s behind."""
import json
import sys
import time

READS = 5
SHIFT = [0.0]


def shifted_time() -> float:
    return time.time() - SHIFT[0]


def main() -> int:
    shard, honest, maddrs = int(sys.argv[1]), bytes.fromhex(sys.argv[2]), tuple(sys.argv[3:])
    import hivemind  # noqa: F401 (every module that reads the clock, loaded before it is shifted)

    from node.config import SwarmConfig
    from node.swarm.dht import SwarmDHT

    for module in list(sys.modules.values()):  # every clock hivemind and our node read: get_dht_time
        if getattr(module, "get_dht_time", None) is time.time:
            module.get_dht_time = shifted_time
    reader = SwarmDHT(SwarmConfig(name="t", initial_peers=maddrs, client_mode=True), bundles=False)
    protocol = reader._node.protocol
    ours = protocol._validate_dictionary
    out = {}
    try:
        for phase, shift, validation in (("hivemind-3s", 3.0, None), ("ours-3s", 3.0, ours), ("ours-30s", 30.0, ours)):
            SHIFT[0] = shift
            if validation is None:
                del protocol._validate_dictionary  # hivemind's own (a class method): one bad sub-record drops all
            else:
                protocol._validate_dictionary = validation
            counts = {"reads": 0, "honest": 0, "others": 0}
            for _ in range(READS):
                found = reader.fetch_shards_async([shard]).result(30)
                counts["reads"] += 1
                counts["honest"] += honest in found
                counts["others"] += len(set(found) - {honest})
                time.sleep(0.5)
            out[phase] = counts
    finally:
        reader.shutdown()
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
