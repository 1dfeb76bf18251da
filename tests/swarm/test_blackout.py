"""Issue 23's shard blackout, end to end over real hivemind nodes: a sub-record stored at the holders'
expiration limit must not hide a shard's honest announcement from a reader whose clock runs behind."""
import json
import subprocess
import sys
import threading
from pathlib import Path

from hivemind.dht.crypto import RSASignatureValidator
from hivemind.utils.crypto import RSAPrivateKey

from bench.attacks.hostile import HostileDHT
from node.config import SwarmConfig
from node.swarm.dht import SwarmDHT, identity_bytes
from protocol import CLOCK_SKEW, MAX_RECORD_TTL
from protocol.codec import Announcement, BundleRef, WireCard, announcement_shard, bundle_digest, encode_announcement

CARD = WireCard("qwen2", 1, False, "fp", 99, "transformers", 1.0, 1.0, "0.1.0")


def two_keys_in_one_shard() -> tuple[int, list]:
    """Two RSA keys whose subkeys hash to one announcement shard (a birthday collision: ~10 keys of 64 shards)."""
    by_shard: dict[int, list] = {}
    for _ in range(200):
        key = RSAPrivateKey()
        keys = by_shard.setdefault(announcement_shard(RSASignatureValidator(key).local_public_key), [])
        keys.append(key)
        if len(keys) == 2:
            return announcement_shard(RSASignatureValidator(key).local_public_key), keys
    raise AssertionError("no two of 200 keys in one of 64 shards")


def identity(path: Path, key) -> str:
    """An identity file holding `key` (which then signs the node's records: its subkey is this key's)."""
    path.write_bytes(identity_bytes(key))
    return str(path)


def test_a_reader_behind_the_holders_clock_still_sees_the_honest_sender(tmp_path):
    shard, (honest_key, ground_key) = two_keys_in_one_shard()
    holder = SwarmDHT(SwarmConfig(name="t"), bundles=False)
    maddrs = tuple(holder.visible_maddrs())
    honest = SwarmDHT(SwarmConfig(name="t", initial_peers=maddrs, client_mode=True,
                                  identity=identity(tmp_path / "honest", honest_key)))
    attacker = HostileDHT(SwarmConfig(name="t", initial_peers=maddrs, client_mode=True,
                                      identity=identity(tmp_path / "ground", ground_key)), card=CARD)
    stop = threading.Event()

    def grind() -> None:  # re-stored every 0.5 s at the holders' expiration limit
        while not stop.wait(0.5):
            attacker.announce_async(b"x" * 100, ttl=MAX_RECORD_TTL + CLOCK_SKEW - 0.2).result(15)

    thread = threading.Thread(target=grind, daemon=True)
    try:
        assert honest.shard == attacker.shard == shard
        ref = BundleRef(bundle_digest(b"groups"), 10, 1)
        assert honest.announce_async(encode_announcement(Announcement(honest.peer_id, (), 0, honest.now(), CARD,
                                                                      ref, ref)), ttl=120).result(15)
        assert attacker.announce_async(b"x" * 100, ttl=MAX_RECORD_TTL + CLOCK_SKEW - 0.2).result(15)
        thread.start()
        assert set(holder.fetch_shards_async([shard]).result(30)) == {honest.own_subkey, attacker.own_subkey}
        reader = subprocess.run([sys.executable, str(Path(__file__).with_name("blackout_reader.py")), str(shard),
                                 honest.own_subkey.hex(), *maddrs], capture_output=True, text=True, timeout=240)
        assert reader.returncode == 0, reader.stderr[-2000:]
        seen = json.loads(reader.stdout.strip().splitlines()[-1])
    finally:
        stop.set()
        if thread.is_alive():
            thread.join(20)
        for node in (attacker, honest, holder):
            node.shutdown()
    assert seen["hivemind-3s"]["honest"] == 0, seen  # the control: hivemind's validation loses the whole shard
    for phase in ("ours-3s", "ours-30s"):  # ours: the honest sender in every read, the ground record never
        assert seen[phase]["honest"] == seen[phase]["reads"] == 5 and seen[phase]["others"] == 0, seen
