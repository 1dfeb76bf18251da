"""A newcomer through the real path (hivemind DHT and streams on loopback, in-process peers): it trains on
received groups within two steps of joining, and the peers it joined learn of it (issue 25's newcomer bound,
at the N this machine can run); with the bootstrap keeping a view (node/swarm/seeding.py, as `swarm bootstrap`
does), its first steps read no whole directory."""
import random
import time
from concurrent.futures import Future

import pytest

from node.config import SwarmConfig, build_config
from node.peer import Peer
from node.swarm.dht import SwarmDHT
from node.swarm.seeding import SeedView
from protocol import ANNOUNCE_SHARDS

WARM = 3  # steps the swarm runs before the newcomer joins


def config(model: str, seed: int):
    return build_config({"model": {"name": model}, "task": {"name": "arith-add"},
                         "train": {"group_policy": "fixed", "group_size": 8, "prompts_per_step": 8, "seed": seed},
                         "swarm": {"gather_deadline": 2.0}})


@pytest.mark.slow
@pytest.mark.parametrize("squatted", [False, True], ids=["announced", "squatted"])
def test_a_newcomer_trains_on_received_groups_within_two_steps(squatted):
    """squatted: the DHT refuses every announcement of the newcomer (as when Sybil keys ground into its shard
    fill it): it is still found, through its pushes, and trains as soon."""
    boot = SwarmDHT(SwarmConfig(), relays=False)  # as `swarm bootstrap`: serves its view only
    seeds = SeedView(boot, boot.settings, random.Random(0))
    initial = tuple(boot.visible_maddrs())
    dhts = [SwarmDHT(SwarmConfig(initial_peers=initial)) for _ in range(4)]
    peers = [Peer(config(model, seed), transport=dht)
             for seed, (model, dht) in enumerate(zip(("tiny-add", "tiny-add-lora", "small-add"), dhts, strict=False))]
    newcomer = Peer(config("tiny-add", 7), transport=dhts[3])
    if squatted:
        def refused(value, ttl, **shards):
            future = Future()
            future.set_result(False)  # what a store the shard's holders refuse comes to
            return future

        dhts[3].announce_async = refused
    reads = []
    fetch = dhts[3].fetch_shards_async
    dhts[3].fetch_shards_async = lambda shards: (reads.append(len(shards)), fetch(shards))[1]
    asked = []  # whose views the newcomer pulls
    pull = dhts[3].pull_async
    dhts[3].pull_async = lambda peer_id, kind, *a, **kw: (
        asked.append(peer_id) if kind == "view" else None, pull(peer_id, kind, *a, **kw))[1]
    try:
        for step in range(WARM):
            for p in peers:
                p.step(step)
            seeds.round()
        for _ in range(60):  # bounded: the bootstrap's view holds the three peers (a round never waits)
            if seeds.size() >= 3:
                break
            seeds.round()
            time.sleep(0.5)
        assert seeds.size() >= 3, (seeds.size(), seeds.gossip.missed, seeds.refused)
        used = []
        for step in range(2):
            for p in peers:
                p.step(WARM + step)
            used.append(newcomer.step(step).swarm.groups_used)
        assert sum(used) > 0, used  # received groups trained on, by its second step at the latest
        assert newcomer.exchange.gossip.seeded >= 3 and ANNOUNCE_SHARDS not in reads, reads  # no whole read
        # seeded by two DHT neighbours (the peers it joined), not by the bootstrap, which is only the fallback
        assert boot.peer_id not in asked and {d.peer_id for d in dhts[:3]} & set(asked[:2]), asked
        for p in peers:
            p.step(WARM + 2)
        knows = [dhts[3].own_subkey in p.exchange.ledger.known for p in peers]
        assert all(knows), knows
    finally:
        for p in [*peers, newcomer]:
            p.close()
        for dht in [*dhts, boot]:
            dht.shutdown()
