"""Who a peer pulls from: discovery memory, weighted choice with exploration, exponential back-off."""
import math
import random

import pytest

from node.swarm.senders import ESTABLISHED_AFTER, EXPLORE, SenderLedger, backoff_steps
from protocol.codec import Announcement, BundleRef, WireCard, bundle_digest

CARD = WireCard("qwen2", 1, False, "fp", 99, "transformers", 1.0, 1.0, "0")
LOG2 = math.log(2.0)


def announcement(name: str, created: float = 100.0, peer_id: str = "") -> Announcement:
    ref = BundleRef(bundle_digest(name.encode()), 10, 1)
    return Announcement(peer_id or name, (), 0, created, CARD, ref, ref)


def test_back_off_doubles_and_is_capped():
    assert [backoff_steps(f) for f in range(6)] == [0, 1, 2, 4, 8, 16]
    assert backoff_steps(50) == 2 ** 10


def test_a_failing_sender_sits_out_and_a_good_one_is_preferred():
    senders = SenderLedger(capacity=10, rng=random.Random(0))
    for name in ("good", "plain", "bad"):
        senders.learn(name.encode(), announcement(name), expires=1000.0)
        senders.known[name.encode()].informative_pulls = ESTABLISHED_AFTER  # all three established: one pool
    senders.failed(b"bad", step=5)
    senders.failed(b"bad", step=5)  # its groups and summaries pulls failed together: one failure
    senders.failed(b"bad", step=6)  # two failures in a row: out until step 8
    assert senders.known[b"bad"].failures == 2
    assert b"bad" not in senders.choose(now=0.0, step=7, k=3, busy=set(), explore=3)
    assert b"bad" in senders.choose(now=0.0, step=8, k=3, busy=set(), explore=3)
    assert senders.choose(now=0.0, step=8, k=3, busy={b"good", b"plain", b"bad"}, explore=3) == []
    for _ in range(20):
        senders.succeeded(b"good", informative_share=1.0)
    senders.succeeded(b"plain", informative_share=0.0)
    first = [senders.choose(now=0.0, step=100, k=1, busy=set(), explore=3)[0] for _ in range(2000)]
    share = first.count(b"good") / len(first)  # weight 0.1 + ~1.0 against 0.1 + 0.15 and 0.1 + 0.5
    weights = {"good": EXPLORE + senders.known[b"good"].score, "plain": EXPLORE + senders.known[b"plain"].score,
               "bad": EXPLORE + senders.known[b"bad"].score}
    assert abs(share - weights["good"] / sum(weights.values())) < 0.05
    assert first.count(b"plain") > 0  # exploration: never starved


def test_memory_is_bounded_and_follows_the_dht():
    senders = SenderLedger(capacity=2, rng=random.Random(0))
    for i, name in enumerate(("a", "b", "c")):
        senders.learn(name.encode(), announcement(name), expires=10.0 + i)
    assert list(senders.known) == [b"b", b"c"]  # the oldest forgotten beyond capacity
    assert senders.live(now=11.5) == [b"c"]  # b's announcement expired
    senders.learn(b"c", announcement("c", created=50.0), expires=500.0)
    senders.learn(b"c", announcement("c-old", created=1.0), expires=900.0)  # an older announcement: ignored
    assert senders.known[b"c"].announcement.peer_id == "c"
    senders.forget(withdrawn=())  # a read that came back without it (empty, late, blacked out): still known
    assert senders.live(now=0.0) == [b"c"]
    senders.forget(withdrawn={b"c"})  # a tombstone in its place: it withdrew
    assert senders.live(now=0.0) == []


def test_established_senders_are_pulled_first_and_newcomers_keep_their_exploration_slots():
    senders = SenderLedger(capacity=100, rng=random.Random(0))
    honest = [f"honest-{i}".encode() for i in range(10)]
    for name in honest:
        senders.learn(name, announcement(name.decode()), expires=1000.0)
        for _ in range(ESTABLISHED_AFTER):
            senders.succeeded(name, informative_share=0.5)
    sybils = [f"sybil-{i}".encode() for i in range(50)]
    for sybil in sybils:
        senders.learn(sybil, announcement(sybil.decode()), expires=1000.0)
    for _ in range(200):  # fifty newcomers cannot crowd out established senders; exploration goes on
        chosen = senders.choose(now=0.0, step=1, k=8, busy=set(), explore=2)
        assert len(chosen) == 8 and sum(c in sybils for c in chosen) == 2
    few = SenderLedger(capacity=100, rng=random.Random(0))  # two established: newcomers fill what they leave
    for name in honest[:2]:
        few.learn(name, announcement(name.decode()), expires=1000.0)
        for _ in range(ESTABLISHED_AFTER):
            few.succeeded(name, informative_share=0.5)
    for sybil in sybils:
        few.learn(sybil, announcement(sybil.decode()), expires=1000.0)
    for _ in range(100):
        chosen = few.choose(now=0.0, step=1, k=8, busy=set(), explore=2)
        assert set(honest[:2]) <= set(chosen) and len(chosen) == 8
    # a newcomer whose pulls bring informative, valid groups is established; an uninformative one never is,
    # and sinks towards the exploration floor
    for _ in range(5):
        senders.succeeded(sybils[3], informative_share=0.0)
    assert senders.known[sybils[3]].score < 0.1
    senders.succeeded(sybils[4], informative_share=0.25)
    senders.succeeded(sybils[4], informative_share=0.25)
    assert senders.is_newcomer(sybils[3]) and not senders.is_newcomer(sybils[4])


def test_identities_naming_one_peer_id_are_pulled_as_one():
    senders = SenderLedger(capacity=100, rng=random.Random(0))
    for i in range(20):  # twenty identities announcing the same peer (a victim's, say)
        senders.learn(f"alias-{i}".encode(), announcement(f"alias-{i}", peer_id="the-peer"), expires=1000.0)
    senders.learn(b"other", announcement("other"), expires=1000.0)
    for _ in range(50):
        chosen = senders.choose(now=0.0, step=1, k=8, busy=set(), explore=8)
        assert len(chosen) == 2 and b"other" in chosen
    assert senders.choose(now=0.0, step=1, k=8, busy={b"alias-3"}, explore=8) == [b"other"]


def test_establishment_is_lost_to_refused_records_and_for_good_to_evidence():
    senders = SenderLedger(capacity=10, rng=random.Random(0))
    for name, peer in (("a", "A"), ("b", "B"), ("b2", "B")):  # b2: a second identity naming b's peer id
        senders.learn(name.encode(), announcement(name, peer_id=peer), expires=1000.0)
        senders.known[name.encode()].informative_pulls = ESTABLISHED_AFTER
    senders.failed(b"a", step=0)  # a pull that failed: backed off, still established
    assert not senders.is_newcomer(b"a")
    senders.failed(b"a", step=1, refused=True)  # only refused records: a newcomer again
    assert senders.is_newcomer(b"a")
    assert not senders.observe(b"b", 19.9, bound=20.0) and senders.known[b"b"].evidence == 19.9
    assert not senders.observe(b"b", 25.0, bound=0.0)  # bound 0: the detector is off
    assert senders.observe(b"b", 20.0, bound=20.0)  # just reached: distrusted, with its peer id
    assert not senders.observe(b"b", 30.0, bound=20.0)  # told once
    assert list(senders.distrusted) == ["B"] and senders.is_newcomer(b"b")
    for step in range(2000, 2050):  # whoever names peer id B is never pulled again
        chosen = senders.choose(now=0.0, step=step, k=3, busy=set(), explore=3)
        assert chosen == [b"a"]
    assert not senders.observe(b"unknown", 50.0, bound=20.0)


def test_a_harmful_sender_is_demoted_for_a_while_then_tried_afresh():
    senders = SenderLedger(capacity=10, rng=random.Random(0))
    for name, peer in (("a", "A"), ("b", "B"), ("b2", "B")):  # b2: a second identity naming b's peer id
        senders.learn(name.encode(), announcement(name, peer_id=peer), expires=1000.0)
        senders.known[name.encode()].informative_pulls = ESTABLISHED_AFTER
    assert not senders.observe_harm(b"b", 4.9, bound=5.0, step=10, rest=50) and senders.known[b"b"].harm == 4.9
    assert not senders.observe_harm(b"b", 9.0, bound=0.0, step=10, rest=50)  # bound 0: the detector is off
    assert senders.observe_harm(b"b", 5.0, bound=5.0, step=11, rest=50)  # demoted: starts afresh, a newcomer
    assert senders.known[b"b"].harm == 0.0 and senders.is_newcomer(b"b") and senders.demoted == {"B": 62}
    assert not senders.observe_harm(b"b2", 7.0, bound=5.0, step=12, rest=50)  # already demoted: told once
    for step in range(12, 62):  # neither identity of peer B is pulled while it is demoted
        assert senders.choose(now=0.0, step=step, k=3, busy=set(), explore=3) == [b"a"]
    chosen = set(senders.choose(now=0.0, step=62, k=3, busy=set(), explore=3))  # back, under one identity
    assert b"a" in chosen and len(chosen & {b"b", b"b2"}) == 1
    assert senders.observe_harm(b"b", 6.0, bound=5.0, step=80, rest=50) and senders.demoted == {"B": 131}
    assert not senders.observe_harm(b"unknown", 50.0, bound=5.0, step=80, rest=50)


def test_a_sender_is_present_until_a_pull_fails_and_again_when_it_announces_or_answers():
    senders = SenderLedger(capacity=10, rng=random.Random(0))
    for name in ("alive", "dead", "rude"):
        senders.learn(name.encode(), announcement(name), expires=1000.0)
    senders.failed(b"dead", step=3)  # did not answer: its announcement is still live, but it is not counted
    senders.failed(b"rude", step=3, refused=True)  # answered with records we refused: there, if unwelcome
    assert senders.live(now=0.0) == [b"alive", b"dead", b"rude"]
    assert senders.present(now=0.0) == [b"alive", b"rude"]
    senders.learn(b"dead", announcement("dead"), expires=1000.0)  # the same announcement read again: still gone
    assert b"dead" not in senders.present(now=0.0)
    for step in range(4, 10):  # it stayed dead: backed off for 2^6 steps
        senders.failed(b"dead", step=step)
    assert senders.known[b"dead"].retry_step == 9 + 64  # 7 failures in a row
    senders.learn(b"dead", announcement("dead", created=101.0), expires=1000.0)  # a new one (a restart): back,
    assert b"dead" in senders.present(now=0.0)  # and pulled at once
    assert b"dead" in senders.choose(now=0.0, step=10, k=3, busy=set(), explore=3)
    senders.learn(b"rude", announcement("rude", created=101.0), expires=1000.0)  # refusals keep their back-off
    assert senders.known[b"rude"].retry_step == 4
    senders.failed(b"dead", step=4)
    senders.succeeded(b"dead", informative_share=1.0)  # a pull that worked: back too
    assert b"dead" in senders.present(now=0.0)
    assert senders.present(now=2000.0) == []  # expired announcements are forgotten


def test_the_ledger_keeps_each_senders_evidence_and_answers_whose_rows_are_cut_this_step():
    """What the learner reports once a plan is made (node/rl/transfer/guard.py): each sender's log-evidence of
    the step. The ledger adds it to the sender's CUSUM (a negative past counts as 0) and answers the senders whose
    rows give no gradient: the one whose statistic reached the bound now, and any identity of a peer id
    distrusted before."""
    from node.config import TrustConfig

    ledger = SenderLedger(capacity=10, rng=random.Random(0), trust=TrustConfig(sender_bound=20.0))
    for name, peer in (("a", "A"), ("b", "B"), ("b2", "B"), ("c", "C")):
        ledger.learn(name.encode(), announcement(name, peer_id=peer), expires=1000.0)
    ledger.known[b"a"].bets = (-7.0, 1.0)  # two bet sizes here (the learner reports guard.SENDER_BETS)
    ledger.known[b"b"].bets = (15.0, 2.0)
    ledger.begin_step(4)
    assert ledger.judge_evidence({b"a": (3.0, 0.5), b"b": (5.5 + LOG2, 1.0), b"c": (-0.5, -0.1)}) == {b"b"}
    assert [ledger.known[s].bets for s in (b"a", b"b", b"c")] == [(3.0, 1.5), pytest.approx((20.5 + LOG2, 3.0)),
                                                                    (-0.5, -0.1)]
    assert [ledger.known[s].evidence for s in (b"a", b"b", b"c")] == pytest.approx([3 - LOG2, 20.5, -0.1 - LOG2])
    assert ledger.verdicts.distrusted == 1 and ledger.verdicts.evidence == pytest.approx(20.5)
    assert list(ledger.distrusted) == ["B"]
    assert ledger.judge_evidence({b"b2": (-1.0, -1.0)}) == {b"b2"}  # peer B's other identity: cut, not told twice
    assert ledger.verdicts.distrusted == 1
    assert ledger.judge_evidence({b"gone": (25.0, 0.0)}) == {b"gone"}  # forgotten meanwhile: this step's alone
    assert ledger.judge_evidence({b"gone": (19.0, 0.0)}) == set()
    ledger.begin_step(5)
    assert ledger.verdicts.distrusted == 0 and ledger.verdicts.evidence == 0.0


def test_the_ledger_demotes_a_sender_whose_groups_keep_pulling_against_ours():
    """What the learner reports after an update, with the harm detector on: each sender's cosine with our own
    groups' head gradient. The ledger bets on it (log(1 - 0.5 clip(2 cos)), a CUSUM) and demotes at the bound."""
    import math

    from node.config import TrustConfig

    ledger = SenderLedger(capacity=10, rng=random.Random(0), trust=TrustConfig(harm_bound=5.0, demote_steps=50))
    for name in ("with", "against"):
        ledger.learn(name.encode(), announcement(name), expires=1000.0)
    assert ledger.watches_alignment
    ledger.begin_step(3)
    ledger.known[b"against"].harm = 4.8
    ledger.judge_alignment({b"with": 0.5, b"against": -0.25})
    assert ledger.known[b"with"].harm == math.log(0.5)
    assert ledger.demoted == {"against": 54} and ledger.known[b"against"].harm == 0.0  # 4.8 + log 1.25 >= 5
    assert ledger.verdicts.demoted == 1 and ledger.verdicts.alignments == {"with": 0.5, "against": -0.25}
    assert not SenderLedger(1, random.Random(0), TrustConfig(harm_bound=0.0)).watches_alignment
