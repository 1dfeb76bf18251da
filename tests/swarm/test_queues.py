"""queues.py: which received record a gather looks at next (pure bookkeeping, exact orders and caps)."""
import random

from node.swarm.bounded import BoundedSet
from node.swarm.queues import RoundRobin


def records(sender: bytes, n: int) -> list[bytes]:
    return [sender + b"-%d" % i for i in range(n)]


def run(rr: RoundRobin, budget: int, sender_cap: int, newcomers=(), newcomers_too=True, explore=1, pull_peers=4,
        completions=1) -> list[tuple[bytes, bytes]]:
    """Takes records, each worth `completions` completions and one group; returns what was handled, in order."""
    handled = []

    def handle(sender, raw):
        handled.append((sender, raw))
        rr.taken[sender] += completions

    rr.take(budget, sender_cap, explore, pull_peers, lambda s: s in newcomers, False, newcomers_too,
            lambda limit: len(handled) >= limit, handle)
    return handled


def fresh(seed: int = 0) -> RoundRobin:
    return RoundRobin(random.Random(seed), BoundedSet(100), BoundedSet(100))


def test_one_record_from_each_sender_in_turn_under_the_per_sender_cap():
    rr = fresh()
    for s in (b"a", b"b"):
        rr.add(s, s + b"-bundle", records(s, 5))
    handled = run(rr, budget=10, sender_cap=3)
    senders = [s for s, _ in handled]
    assert len(handled) == 6 and senders.count(b"a") == 3 and senders.count(b"b") == 3  # each capped at 3
    assert senders[0] != senders[1] and senders[2] != senders[3]  # alternating
    assert [r for s, r in handled if s == b"a"] == records(b"a", 3)  # in the bundle's order


def test_the_budget_stops_the_round_and_records_handled_before_are_skipped():
    rr = fresh()
    rr.add(b"a", b"a-bundle", records(b"a", 4))
    assert len(run(rr, budget=2, sender_cap=10)) == 2
    again = fresh()
    again.seen, again.done_bundles = rr.seen, rr.done_bundles  # the next step, the same memories
    again.add(b"a", b"a-bundle", records(b"a", 4))
    assert [r for _, r in run(again, budget=10, sender_cap=10)] == records(b"a", 4)[2:]  # only the two new ones
    assert b"a-bundle" in again.done_bundles  # every record of it handled now


def test_newcomers_come_after_the_established_and_share_one_cap():
    rr = fresh()
    for s in (b"e", b"n1", b"n2"):
        rr.add(s, s + b"-bundle", records(s, 6))
    handled = run(rr, budget=12, sender_cap=4, newcomers={b"n1", b"n2"}, explore=1, pull_peers=4)
    senders = [s for s, _ in handled]
    first_newcomer = min(senders.index(b"n1"), senders.index(b"n2"))
    assert senders[:first_newcomer] == [b"e"] * 4  # the established sender first, up to its cap
    assert senders.count(b"n1") + senders.count(b"n2") == 4  # newcomers together: explore x sender_cap
    held_back = run(fresh_with(b"e", b"n1"), budget=12, sender_cap=4, newcomers={b"n1"}, newcomers_too=False)
    assert {s for s, _ in held_back} == {b"e"}  # an established sender's pull still on its way: none yet


def fresh_with(*senders: bytes) -> RoundRobin:
    rr = fresh()
    for s in senders:
        rr.add(s, s + b"-bundle", records(s, 6))
    return rr


def test_an_empty_bundle_is_done_at_once():
    rr = fresh()
    rr.add(b"a", b"empty", [])
    assert b"empty" in rr.done_bundles and not rr.queues
