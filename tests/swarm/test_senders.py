"""Who a peer pulls from: discovery memory, weighted choice with exploration, exponential back-off."""
import random

from node.swarm.senders import EXPLORE, Senders, backoff_steps
from protocol.codec import Announcement, BundleRef, WireCard, announcement_shard, bundle_digest

CARD = WireCard("qwen2", 1, False, "fp", 99, "transformers", 1.0, 1.0, "0")


def announcement(name: str, created: float = 100.0) -> Announcement:
    ref = BundleRef(bundle_digest(name.encode()), 10, 1)
    return Announcement(name, (), 0, created, CARD, ref, ref)


def test_back_off_doubles_and_is_capped():
    assert [backoff_steps(f) for f in range(6)] == [0, 1, 2, 4, 8, 16]
    assert backoff_steps(50) == 2 ** 10


def test_a_failing_sender_sits_out_and_a_good_one_is_preferred():
    senders = Senders(capacity=10, rng=random.Random(0))
    for name in ("good", "plain", "bad"):
        senders.learn(name.encode(), announcement(name), expires=1000.0)
    senders.failed(b"bad", step=5)
    senders.failed(b"bad", step=6)  # two failures in a row: out until step 8
    assert b"bad" not in senders.choose(now=0.0, step=7, k=3, busy=set())
    assert b"bad" in senders.choose(now=0.0, step=8, k=3, busy=set())
    assert senders.choose(now=0.0, step=8, k=3, busy={b"good", b"plain", b"bad"}) == []
    for _ in range(20):
        senders.succeeded(b"good", informative_share=1.0)
    senders.succeeded(b"plain", informative_share=0.0)
    first = [senders.choose(now=0.0, step=100, k=1, busy=set())[0] for _ in range(2000)]
    share = first.count(b"good") / len(first)  # weight 0.1 + ~1.0 against 0.1 + 0.15 and 0.1 + 0.5
    weights = {"good": EXPLORE + senders.known[b"good"].score, "plain": EXPLORE + senders.known[b"plain"].score,
               "bad": EXPLORE + senders.known[b"bad"].score}
    assert abs(share - weights["good"] / sum(weights.values())) < 0.05
    assert first.count(b"plain") > 0  # exploration: never starved


def test_memory_is_bounded_and_follows_the_dht():
    senders = Senders(capacity=2, rng=random.Random(0))
    for i, name in enumerate(("a", "b", "c")):
        senders.learn(name.encode(), announcement(name), expires=10.0 + i)
    assert list(senders.known) == [b"b", b"c"]  # the oldest forgotten beyond capacity
    assert senders.live(now=11.5) == [b"c"]  # b's announcement expired
    senders.learn(b"c", announcement("c", created=50.0), expires=500.0)
    senders.learn(b"c", announcement("c-old", created=1.0), expires=900.0)  # an older announcement: ignored
    assert senders.known[b"c"].announcement.peer_id == "c"
    senders.forget_absent({announcement_shard(b"c")}, found={})  # its shard read, and it is gone: withdrawn
    assert senders.live(now=0.0) == []
