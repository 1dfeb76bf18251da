"""A swarm has one task (issue 55, 1): announcements carry it, a joining peer learns it, a differing one is told."""
import random

from node.swarm.memory import MemorySwarm
from node.swarm.swarm_task import SWARM, Found, majority, read_swarm_task, settle
from protocol.codec import Announcement, BundleRef, SwarmTask, WireCard, decode_announcement, encode_announcement
from tests.fixtures import peer

DIGITS = SwarmTask("digits", "1", 64)
ARITH = SwarmTask("arith-add", "1", 8)
CARD = WireCard("llama", 1, False, "tok", 16, "transformers", 1.0, 1.0, "0")
REF = BundleRef(b"\1" * 16, 10, 1)


def announcement(task, created=100.0, peer_id="p"):
    return Announcement(peer_id, (), 0, created, CARD, REF, REF, task=task)


def test_an_announcement_carries_its_task_and_receipts_or_says_none():
    a = announcement(DIGITS)
    assert decode_announcement(encode_announcement(a)) == a
    with_receipts = Announcement("p", (), 0, 1.0, CARD, REF, REF, receipts=BundleRef(b"\2" * 16, 99, 3))
    back = decode_announcement(encode_announcement(with_receipts))
    assert back.task is None and back.receipts == BundleRef(b"\2" * 16, 99, 3)


def test_the_swarms_task_is_the_one_most_identities_announce_a_tie_to_the_newest():
    assert majority([announcement(DIGITS), announcement(DIGITS), announcement(ARITH, 300.0)]) == Found(DIGITS, 2, 3)
    assert majority([announcement(DIGITS, 100.0), announcement(ARITH, 200.0)]).task == ARITH
    assert majority([announcement(None)]) == Found(None, 0, 1)
    assert majority([]) == Found(None, 0, 0)


def test_a_joining_peer_adopts_the_swarms_task_or_is_told_in_one_line():
    found = Found(DIGITS, 3, 3)
    adopt = settle(SWARM, 0, found, "arith-add")
    assert (adopt.task, adopt.answer_cap, adopt.mismatch) == ("digits", 64, False)
    assert adopt.line == "task digits, the swarm's (digits (answer cap 64), announced by 3 of 3 peers read)"
    same = settle("digits", 0, found, "arith-add")
    assert (same.task, same.answer_cap, same.mismatch) == ("digits", 64, False)
    other = settle("arith-add", 0, found, "arith-add")
    assert other.mismatch and other.task == "arith-add"
    assert other.line == ("this swarm trains digits (answer cap 64), announced by 3 of 3 peers read, "
                          "not --task arith-add")
    cap = settle(SWARM, 32, found, "arith-add")
    assert cap.mismatch and "answer cap (generation.max_new_tokens) is 32" in cap.line
    new = settle(SWARM, 0, Found(None, 0, 0), "arith-add")
    assert (new.task, new.answer_cap, new.mismatch) == ("arith-add", 0, False)
    assert "no peer announces yet, so this peer sets the swarm's" in new.line


def test_a_peer_reads_the_swarms_task_from_live_announcements():
    hub = MemorySwarm()
    for name in ("p0", "p1"):
        peer(hub, name).step(0)  # (test_exchange's peers train "arith", answer cap 8)
    found = read_swarm_task(hub.transport("newcomer"), max_age=300.0, rng=random.Random(0))
    assert found.task is not None and (found.task.name, found.task.answer_cap, found.agreeing, found.peers) == (
        "arith", 8, 2, 2)
