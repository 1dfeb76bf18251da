"""Sharing through an in-memory swarm: groups flow, hostile records are dropped and counted, peers go on."""
import functools
import itertools
import time
import zlib
from concurrent.futures import Future

import msgpack
import numpy as np
import pytest

from bench.attacks import hostile
from node.config import build_config
from node.generation.rollouts import score_completion
from node.models.loading import encode_prompt
from node.models.tokenizer import build_tokenizer
from node.peer import Peer
from node.swarm.exchange import BoundedSet, GatherResult, WorkBudget
from node.swarm.memory import MemorySwarm
from node.tasks import get_task
from protocol import ANNOUNCE_SHARDS
from protocol import swarm_pb2 as pb
from protocol.bundle2 import is_bundle2, unpack_groups
from protocol.codec import (
    Announcement,
    BundleRef,
    Limits,
    WireCard,
    WireCompletion,
    WireGroup,
    drawn_index,
    encode_announcement,
    encode_group,
    pack_bundle,
)
from tests.fixtures import gather, peer, publish_bundles, zoo_card

IDENTITIES = itertools.count()
CHAR = build_tokenizer()  # the zoo's character tokenizer (tiny-add's, tiny-sub's)


def latest_records(hub, name: str, kind: str = "groups") -> list[bytes]:
    """The records of the bundle a peer serves now."""
    bundle = hub.served[name].latest(kind)[1]
    return unpack_groups(bundle, Limits()) if kind == "groups" else msgpack.unpackb(bundle, raw=True)


@pytest.fixture(scope="module")
def hub_and_peers():
    hub = MemorySwarm()
    return hub, peer(hub, "a"), peer(hub, "b", model="tiny-sub")


def test_groups_flow_between_heterogeneous_peers(hub_and_peers):
    hub, a, b = hub_and_peers
    a.step(0)  # a publishes; b not yet
    rb = b.step(0)
    assert rb.swarm.groups_used == 4 and rb.swarm.foreign_used == 0 and rb.swarm.rejected == {}
    assert rb.loss.sequences == 32  # 4 own groups x 4 + 4 received x 4
    ra = a.step(1)
    assert ra.swarm.groups_used == 4 and ra.swarm.bytes_in > 0 and ra.swarm.bytes_out > 0
    served = hub.served["b"].latest("groups")[1]  # what crosses the wire: version 2 (protocol/bundle2.py)
    records = unpack_groups(served, Limits())
    assert is_bundle2(served) and len(records) == 4
    assert len(served) <= len(pack_bundle(records, 1 << 20)[0]) / 2  # (291 vs 736 bytes: one card, compressed)
    again = a.step(2)  # b has not published anything new: its step-0 groups are not used twice
    assert again.swarm.groups_used == 0
    # what `swarm status` lists: the other peer, from its announcement (a pulled valid groups from it once)
    from node.swarm.control import NodeStatus

    [known] = a.known_peers()
    assert (known["peer_id"], known["family"], known["step"], known["failures"]) == ("b", "qwen2", 0, 0)
    assert known["params"] == sum(p.numel() for p in b.loaded.model.parameters()) and not known["lora"]
    reply = NodeStatus(peer_list=a.known_peers()).to_reply()
    assert [p.peer_id for p in reply.peer_list] == ["b"] and reply.peer_list[0].age >= 0
    # what a trained on of b's, counted for b by the ledger: its tokens, their mean weight, the share at the cap
    state = a.exchange.ledger.known[b"b"]
    assert [state.tokens, state.capped] == ra.swarm.sender_weights["b"][:2] and state.tokens > 0
    assert state.mass == pytest.approx(ra.swarm.sender_weights["b"][2], abs=1e-3)
    assert (reply.peer_list[0].tokens, reply.peer_list[0].capped_share) == (state.tokens, state.capped / state.tokens)
    assert reply.peer_list[0].mean_weight == pytest.approx(state.mass / state.tokens)


def test_received_rewards_are_rescored_locally(hub_and_peers):
    hub, a, b = hub_and_peers
    claimed = None
    for step in range(10, 40):  # (a peer in a swarm draws its items from its identity and the clock: b's steps
        b.step(step)            #  until one has a group with a right and a wrong answer, bounded)
        groups = [pb.Group.FromString(raw) for raw in unpack_groups(hub.served["b"].latest("groups")[1], Limits())]
        # a group in which b found a right and a wrong answer (so it is informative under our own verifier too)
        claimed = next((g for g in groups if {c.reward for c in g.completions} == {0.0, 1.0}), None)
        if claimed is not None:
            break
    assert claimed is not None, "b sampled no group with a right and a wrong answer in 30 steps"
    honest = hub.served.pop("b")  # b turns liar: only its lying bundle can reach `a`
    truth = [c.reward for c in claimed.completions]
    for c in claimed.completions:  # the liar claims every completion is right
        c.reward = 1.0
    publish_bundles(hub, "b", groups=pack_bundle([claimed.SerializeToString()], 10**6)[0])
    result = gather(a, budget=100, sender_cap=1000)
    assert len(result.groups) == 1 and result.groups[0].group.item.ref.index == claimed.task.index
    rescored = result.groups[0].group.completions
    assert [c.reward for c in rescored] == truth  # our verifier's rewards, not the claimed 1.0s
    assert all(c.reward == score_completion(a.task, result.groups[0].group.item, c) for c in rescored)
    hub.served["b"] = honest


def tamper(hub, mutate, signer: str):
    """b's latest record, changed by `mutate`, as `signer` publishes it: of an item `signer` drew (a copy of
    b's own would be refused as not drawn by it before the check under test), stamped now unless `mutate`
    stamps it otherwise."""
    msg = pb.Group.FromString(latest_records(hub, "b")[0])
    msg.created = float(int(hub.clock()))
    original = msg.prompt_ids
    mutate(msg)
    msg.task.index = drawn_index(signer.encode(), int(msg.created), 0)
    if msg.prompt_ids == original:  # the prompt of the item drawn (unless the mutation is of the prompt)
        msg.prompt_ids = bytes(encode_prompt(CHAR, get_task("arith").item("train", msg.task.index)))
    return msg.SerializeToString()


@pytest.mark.parametrize("mutate, reason", [
    (lambda m: setattr(m, "version", 99), "version"),
    (lambda m: setattr(m.completions[0], "logprobs", np.full(len(m.completions[0].logprobs) // 2, np.nan,
                                                             "<f2").tobytes()), "logprob"),
    (lambda m: setattr(m.completions[0], "logprobs", np.full(len(m.completions[0].logprobs) // 2, 0.7,
                                                             "<f2").tobytes()), "logprob"),
    (lambda m: setattr(m.completions[0], "token_ids", bytes([250]) * len(m.completions[0].token_ids)), "vocab"),
    (lambda m: setattr(m.card, "tokenizer", "other-tokenizer"), "tokenizer"),
    (lambda m: setattr(m.task, "task", "no-such-task"), "other-task"),
    (lambda m: setattr(m, "prompt_ids", bytes([20, 21, 22])), "prompt"),
    (lambda m: setattr(m, "created", 1000.0), "stale"),
    # "stop" claims the completion ended with EOS: one that does not is malformed
    (lambda m: (setattr(m.completions[0], "finish", pb.FINISH_STOP),
                setattr(m.completions[0], "token_ids", bytes([40]) * len(m.completions[0].token_ids))), "shape"),
])
def test_hostile_records_are_rejected_counted_and_the_peer_keeps_training(hub_and_peers, mutate, reason):
    hub, a, b = hub_and_peers
    b.step(20)
    mallory = f"mallory-{next(IDENTITIES)}"  # a new identity each time: a sender of bad records is backed off
    bad = tamper(hub, mutate, mallory)
    publish_bundles(hub, mallory, groups=pack_bundle([bad], 10**6)[0])
    result = a.step(21)
    assert result.swarm.rejected.get(reason, 0) >= 1, result.swarm.rejected
    assert result.swarm.groups_used >= 1  # b's honest groups still arrive
    assert np.isfinite(result.loss.loss)
    hub.transport(mallory).withdraw()


def test_garbage_and_oversize_bundles(hub_and_peers):
    hub, a, _ = hub_and_peers
    publish_bundles(hub, "mallory", groups=b"\xc1\xff not msgpack", summaries=msgpack.packb([b"\x00\x01"]))
    result = a.step(30)
    assert result.swarm.rejected.get("malformed", 0) >= 1 and result.swarm.rejected.get("summary")
    publish_bundles(hub, "mallory", groups=msgpack.packb([b"x" * (4 * 1024 * 1024)]))
    result = a.step(31)  # the oversize bundle, and only it, is refused once (the garbage is not counted again):
    # its announcement names a size above our limit, and the pull of mallory's latest is cut at the first chunk
    assert result.swarm.rejected == {"announcement": 1, "oversize": 1} and np.isfinite(result.loss.loss)
    hub.transport("mallory").withdraw()


def test_local_groups_bounds_own_groups_trained_on_but_all_are_published():
    hub = MemorySwarm()
    lone = peer(hub, "lone", local_groups=1)
    result = lone.step(0)
    assert result.swarm.published == 4 and result.loss.sequences == 4  # 1 own group of G 4 trained on
    assert len(latest_records(hub, "lone")) == 4


def test_gathering_waits_boundedly_and_never_spins():
    hub = MemorySwarm()
    lone = peer(hub, "lone", gather_deadline=5.0)
    assert lone.step(0).swarm.polls == 1  # nobody else in the swarm: no waiting at all
    other = peer(hub, "other")
    other.step(0)
    slept = []
    lone.exchange.sleep = slept.append  # a pull that never finishes: poll with growing intervals until the end
    lone.exchange.transport.pull_async = lambda *args, **kwargs: Future()
    clock, base = iter(range(1000)), time.time()
    hub.clock = lambda: base + next(clock) * 0.5
    other.exchange.transport.announce_async(hub.announcements[other.exchange.transport.shard][b"other"][0], 1e6)
    result = gather(lone, budget=10, sender_cap=1000)
    assert result.polls <= 12 and slept == sorted(slept) and slept[-1] <= 1.0


def test_the_gather_deadline_bounds_a_step_whatever_the_network_does():
    """A DHT whose reads never finish (a hung network): each step's swarm phase ends at the gather deadline,
    the running read is reused rather than doubled, and training goes on."""
    hub = MemorySwarm()
    stuck = peer(hub, "stuck", gather_deadline=0.3)
    started = []

    def never(shards):
        started.append(len(shards))
        return Future()  # never finishes

    stuck.exchange.transport.fetch_shards_async = never
    for step in range(3):
        result = stuck.step(step)
        assert result.swarm.seconds < 0.3 + 2.0, result.swarm  # was: up to 10 s per fetch
        assert result.swarm.late_fetches == 1 and result.loss.sequences == 16  # own groups still trained on
    assert started == [ANNOUNCE_SHARDS]  # one read, ever


def test_summaries_of_other_peers_reach_the_controller():
    hub = MemorySwarm()
    cfg_extra = {"train": {"group_policy": "sagc", "prompts_per_step": 2}}
    a = peer(hub, "a")
    b = Peer(build_config({"model": {"name": "tiny-add"}, "task": {"name": "arith"}, **cfg_extra,
                           "swarm": {"gather_deadline": 0.1, "shards_per_step": ANNOUNCE_SHARDS}}),
             transport=hub.transport("b"))
    a.step(0)
    assert b.step(0).group.summaries_used == 2 + 4  # own 2 groups + a's 4 summaries (G=4 is a candidate)


def test_a_small_swarm_is_read_whole_only_now_and_then():
    """Without peer sampling, fewer senders known than we pull from: all 64 shards at once every
    swarm.whole_read_every seconds (every step while we know none), the rotation in between, which still covers
    every shard in 64 / 8 steps. (With it, a view that holds anyone replaces the whole reads: test_seeding.py.)"""
    now = [1000.0]
    hub = MemorySwarm(clock=lambda: now[0])
    a = peer(hub, "a", shards_per_step=8, whole_read_every=30, gossip=False)
    b = peer(hub, "b", model="tiny-sub", shards_per_step=8)
    reads = []
    fetch = a.exchange.transport.fetch_shards_async
    a.exchange.transport.fetch_shards_async = lambda shards: (reads.append(list(shards)), fetch(shards))[1]
    gather(a, 8, 64)  # alone: read whole
    gather(a, 8, 64)  # still alone: whole again
    b.step(0)
    gather(a, 8, 64)  # and there is b
    assert [len(r) for r in reads] == [64, 64, 64] and len(a.exchange.ledger.live(now[0])) == 1
    for _ in range(8):
        now[0] += 2.0
        gather(a, 8, 64)
    assert [len(r) for r in reads[3:]] == [8] * 8 and {s for r in reads[3:] for s in r} == set(range(64))
    now[0] += 30.0
    gather(a, 8, 64)
    assert len(reads[-1]) == 64


def test_a_bundle_respects_the_size_budget():
    records = [encode_group_stub(i) for i in range(10)]
    bundle, left = pack_bundle(records, max_bytes=3 * len(records[0]) + 60)
    assert left == 7 and len(msgpack.unpackb(bundle)) == 3


def encode_group_stub(i):
    from protocol.codec import WireCard, WireCompletion, WireGroup

    card = WireCard("qwen2", 1, False, "fp", 99, "transformers", 1.0, 1.0, "0")
    comps = [WireCompletion([1, 2, 3], [-0.5, -0.5, -0.5], "length") for _ in range(2)]
    return encode_group(WireGroup("arith", "1", "train", i, [4, 5], comps, card))


# ---- the trust boundary, exactly (in-memory transport; the same attacks through real processes are in
# test_hostile_swarm.py) ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def victim():
    return hostile.victim_for("tiny-add", "arith")


def lone_peer(hub, name="a", model="tiny-add", **swarm):
    p = peer(hub, name, model=model, **swarm)
    p.exchange.sleep = lambda s: None
    return p


def publish(hub, sender: str, records, kind="groups"):
    publish_bundles(hub, sender, **{kind: pack_bundle(records, 3 << 20)[0]})


def test_each_record_counts_once_however_often_it_is_polled(victim):
    hub = MemorySwarm()
    a = lone_peer(hub)
    publish(hub, "m", [hostile.padding_poison(victim.signed_by(b"m"), i, hub.clock(), claims="low")
                       for i in range(5)])
    totals = [a.step(s).swarm.rejected.get("logprob", 0) for s in range(6)]
    assert sum(totals) == 5 and totals[0] == 5


def test_copies_restamps_echoes_and_the_future_are_refused(victim):
    """Another peer's groups served as one's own (as published, or re-stamped: front-running) are not of items
    the server drew, and are refused as such ("drawn"), whoever used them first; a group of one's own draw
    stamped in the future is refused as from the future."""
    hub = MemorySwarm()
    a, b = lone_peer(hub, "a"), lone_peer(hub, "b", model="tiny-sub")
    a.step(0)
    original = latest_records(hub, "a")
    assert b.step(0).swarm.groups_used == 4
    now = hub.clock()
    publish(hub, "m", [hostile.restamped(r, 10**6, now) for r in original]  # b used these already
            + [hostile.plain(victim.signed_by(b"m"), 77, created=now + 3600)])
    publish(hub, "echo", original)  # a's own groups, back to a
    m_b, m_a = b.step(1).swarm, a.step(1).swarm
    assert m_b.rejected == {"drawn": 4, "future": 1}  # (echo's records b handled already, as a's: not again)
    assert m_a.rejected == {"drawn": 8, "future": 1}


def test_a_generators_group_seen_again_is_a_duplicate_and_a_copy_before_it_costs_it_nothing(victim):
    """A group its generator serves again (in a new bundle, under another step number: a restarted peer, or a
    relay's copy of the same record) is a benign duplicate: not used twice, not refused, not held against it.
    A copier that serves the generator's groups first (front-running) has them refused as not drawn by it,
    and the generator's own copies are then used as if the copier were not there, and credited to it."""
    hub = MemorySwarm()
    a, b = lone_peer(hub, "a"), lone_peer(hub, "b", model="tiny-sub")
    a.step(0)
    original = latest_records(hub, "a")
    assert b.step(0).swarm.groups_used == 4
    sender = next(iter(b.exchange.ledger.known))
    restep = [hostile.restamped(r, 7, pb.Group.FromString(r).created) for r in original]
    publish_bundles(hub, "a", groups=pack_bundle(restep, 3 << 20)[0])  # "a" again, as after its restart
    again = b.step(1).swarm
    assert (again.duplicates, again.rejected, again.groups_used) == (4, {}, 0)
    assert b.exchange.ledger.known[sender].failures == 0  # not backed off, not a newcomer again for it
    a.step(1)
    fresh = latest_records(hub, "a")
    publish(hub, "thief", [hostile.restamped(r, 0, pb.Group.FromString(r).created) for r in fresh])
    served = hub.served.pop("a")  # the thief's copies reach b first
    first = b.step(2).swarm
    assert first.rejected == {"drawn": 4} and first.groups_used == 0
    hub.served["a"] = served
    then = b.step(3).swarm
    assert then.groups_used == 4 and then.rejected == {} and then.duplicates == 0
    assert b.exchange.credit.given == {"a": 8} and "thief" not in b.exchange.credit.given  # credit: the generator's


def test_one_sender_cannot_fill_a_step(victim):
    hub = MemorySwarm()
    a = lone_peer(hub, received_groups=64)
    publish(hub, "m", [hostile.plain(victim.signed_by(b"m"), 3000 + i, created=hub.clock()) for i in range(64)])
    result = gather(a, budget=64, sender_cap=16)  # 16 completions: our own 4 groups of 4
    assert len(result.groups) == 2 and result.senders == 1  # groups of 8: 8 + 8 reaches the cap


def test_work_on_received_records_has_a_per_step_budget(victim):
    hub = MemorySwarm()
    a = lone_peer(hub, max_records_per_step=10)
    bad = [hostile.padding_poison(victim, i, hub.clock(), claims="low") for i in range(30)]
    publish(hub, "m", bad)
    result = gather(a, budget=32, sender_cap=10**6)
    assert result.rejected["logprob"] == 10 and result.budget_hit == "records"  # rejected ones count
    cpu = lone_peer(MemorySwarm(), max_receive_cpu=1e-9)
    publish(cpu.exchange.transport.hub, "m", bad)
    result = gather(cpu, budget=32, sender_cap=10**6)
    assert result.budget_hit == "cpu" and sum(result.rejected.values()) <= 1
    few_bytes = lone_peer(MemorySwarm(), max_bytes_per_step=100)
    publish(few_bytes.exchange.transport.hub, "m", bad)
    assert gather(few_bytes, budget=32, sender_cap=10**6).budget_hit == "bytes"


def test_groups_of_another_task_are_refused_as_such_without_loading_it(victim, monkeypatch):
    """A swarm trains one task: a group of any other (a hub dataset, a reasoning-gym task, an offline one) is
    refused as "other-task" before anything of it is built or loaded."""
    import sys

    hub = MemorySwarm()
    a = lone_peer(hub)
    m = victim.signed_by(b"m")
    publish(hub, "m", hostile.task_references(m, ("gsm8k", "math500", "gym:chain_sum"), hub.clock())
            + hostile.task_references(m, ("count", "digits"), hub.clock()))  # offline, but not this prompt
    before = set(sys.modules)
    result = gather(a, budget=8, sender_cap=10**6)
    assert result.rejected == {"other-task": 5}
    assert not {"datasets", "reasoning_gym"} & (set(sys.modules) - before)  # nothing was loaded to check
    monkeypatch.setattr(a.task, "score", lambda *args: 1 / 0)  # whatever the task's own code raises ...
    m2 = victim.signed_by(b"m2")  # (m sent only bad records: backed off)
    publish(hub, "m2", [hostile.plain(m2, 5, created=hub.clock())])
    assert gather(a, budget=8, sender_cap=10**6).rejected == {"task": 1}  # ... is a rejection


def test_summaries_count_once_per_sender_and_step():
    hub = MemorySwarm()
    a = lone_peer(hub)
    publish(hub, "m", hostile.summary_flood(step=5, n=20), kind="summaries")
    first = gather(a, budget=1, sender_cap=1).summaries
    publish(hub, "m", hostile.summary_flood(step=5, n=30), kind="summaries")  # same step, another bundle
    second = gather(a, budget=1, sender_cap=1).summaries
    publish(hub, "m", hostile.summary_flood(step=6, n=3), kind="summaries")
    third = gather(a, budget=1, sender_cap=1).summaries
    assert len(first[b"m"]) == 20 and second == {} and len(third[b"m"]) == 3


def test_uninformative_received_groups_are_counted_not_trained_on():
    """A group whose completions all score the same under our verifier has zero advantage: with
    swarm.informative_only (the default) it is left out of the batch and counted; without, it is used. (A
    fixed clock: the sender's items, drawn from its identity and the second, are the same at every run.)"""
    hub = MemorySwarm(clock=lambda: 1_800_000_000.0)
    cfg = build_config({"model": {"name": "tiny-add"}, "task": {"name": "arith"},
                        "train": {"group_policy": "fixed", "group_size": 2, "prompts_per_step": 16}})
    sender = Peer(cfg, transport=hub.transport("sender"))
    sender.step(0)
    picky, everything = peer(hub, "picky", informative_only=True), peer(hub, "all")
    used = gather(picky, budget=100, sender_cap=1000)
    plain = gather(everything, budget=100, sender_cap=1000)
    assert len(plain.groups) == 16 and plain.uninformative == 0
    assert everything.transfer.name == "f-tis"  # auto, on a task that reads only the answer ...
    assert not any(r.work_checked for r in plain.groups)  # ... whose rows no floor would lift
    mixed = [r.group for r in plain.groups if len(set(r.group.rewards)) > 1]
    assert 0 < len(mixed) < 16  # both kinds were sent
    assert sorted(r.group.item.ref.index for r in used.groups) == sorted(g.item.ref.index for g in mixed)
    assert used.uninformative == 16 - len(mixed) and used.rejected == {}
    # verified-imitation: a group right everywhere can teach where our greedy answer fails (its baseline is ours,
    # not its own), so only groups with nothing right are left out
    baseline = peer(hub, "baseline", transfer="verified-imitation", informative_only=True)
    kept = gather(baseline, budget=100, sender_cap=1000)
    useful = [r.group for r in plain.groups if max(r.group.rewards) > 0]
    assert len(useful) > len(mixed)  # some groups were right everywhere
    assert sorted(r.group.item.ref.index for r in kept.groups) == sorted(g.item.ref.index for g in useful)
    assert kept.uninformative == 16 - len(useful)


def test_groups_flow_between_peers_with_different_tokenizers():
    """A char-tokenizer peer and a BPE peer (the zoo's two tokenizers): each trains on the other's groups,
    re-tokenized into its own ids, with one sequence-level weight per completion; with
    swarm.foreign_tokenizers off they are refused ("tokenizer"), as before."""
    hub = MemorySwarm()
    char, bpe = peer(hub, "char"), peer(hub, "bpe", model="tiny-add-bpe")
    assert char.exchange.card.tokenizer_source == "zoo:char" and bpe.exchange.card.tokenizer_source == "zoo:bpe"
    char.step(0)
    got = bpe.step(0)
    assert got.swarm.groups_used == got.swarm.foreign_used == 4 and got.swarm.rejected == {}, got.swarm
    assert got.loss.sequences == 32 and got.loss.implausible == 0
    back = char.step(1)  # BPE completions of up to 8 tokens can be longer than 8 characters: no longer refused
    assert back.swarm.groups_used == back.swarm.foreign_used == 4 and back.swarm.rejected == {}, back.swarm
    # what the BPE peer trained on: the char peer's text in BPE ids, the sender's total log-prob kept
    raw = latest_records(hub, "char")
    sent = list(pb.Group.FromString(raw[0]).completions)
    bpe.exchange.seen = BoundedSet(10)  # forget what was handled, to rebuild the same record again
    received = bpe.exchange._accept(GatherResult(), b"char", raw[0], WorkBudget(10, 10**9, 10.0), 0.0)
    assert received is not None and received.foreign and received.sender == b"char"
    group = received.group
    assert group.prompt_ids == bpe.loaded.tokenizer(group.item.prompt).input_ids
    for c, s in zip(group.completions, sent, strict=True):
        text = char.loaded.tokenizer.decode(np.frombuffer(s.token_ids, "<u1").tolist(), skip_special_tokens=True)
        assert c.text == text and bpe.loaded.tokenizer.decode(c.token_ids, skip_special_tokens=True) == text
        total = float(np.frombuffer(s.logprobs, "<f2").astype(np.float64).sum())
        assert sum(c.logprobs) == pytest.approx(total, abs=1e-3) and len(set(c.logprobs)) == 1
    off = peer(hub, "bpe-off", model="tiny-add-bpe", foreign_tokenizers=False)
    char.step(2)
    assert off.step(0).swarm.rejected.get("tokenizer", 0) >= 1
    assert bpe.exchange.unusable_tokenizer(char.exchange.card) == ""
    uncached = bpe_card(source="hub:swarm-node-tests/not-cached", fingerprint="0" * 16)
    assert char.exchange.unusable_tokenizer(uncached).endswith("is not ours and cannot be built here")
    assert off.exchange.unusable_tokenizer(char.exchange.card).endswith("is not ours (swarm.foreign_tokenizers is off)")


def test_building_a_partners_tokenizer_is_not_work_charged_to_its_records(monkeypatch):
    """The per-step CPU budget bounds the work on received records. A new partner's tokenizer is built when its
    announcement is first checked (Gemma's GGUF one: 3-5 CPU seconds here); charged to the budget, it spent all of
    it before the partner's records were read, and the step took none of them (every SmolLM2 + Gemma seed)."""
    import node.models.loading as loading

    built = loading.resolve_source

    def slow_to_build(source, fingerprint):  # 0.6 s of this thread's CPU, as a large tokenizer costs
        start = time.thread_time()
        while time.thread_time() - start < 0.6:
            pass
        return built(source, fingerprint)

    monkeypatch.setattr(loading, "resolve_source", slow_to_build)
    hub = MemorySwarm()
    char, bpe = peer(hub, "char"), peer(hub, "bpe", model="tiny-add-bpe", max_receive_cpu=0.4)
    char.step(0)
    got = bpe.step(0)
    assert got.swarm.budget_hit == "" and got.swarm.foreign_used == 4 and got.swarm.rejected == {}, got.swarm
    # (the records themselves stay bounded: test_work_on_received_records_has_a_per_step_budget)


def bpe_card(source="zoo:bpe", fingerprint=None) -> WireCard:
    from node.models.tokenizer import build_tokenizer, tokenizer_fingerprint

    tok = build_tokenizer("bpe")
    return WireCard("qwen2", 1, False, fingerprint or tokenizer_fingerprint(tok), len(tok), "transformers", 1.0,
                    1.0, "test", source)


def bpe_group(hub, slot: int, completion_tokens: list[str], source="zoo:bpe", fingerprint=None,
              prompt_shift=0, signer: bytes = b"forger") -> bytes:
    """A group as a BPE peer would send it (or a forgery of one): completions given as BPE tokens, the item
    the slot-th `signer` draws now."""
    from node.models.tokenizer import build_tokenizer

    tok = build_tokenizer("bpe")
    card = bpe_card(source, fingerprint)
    stamp = int(hub.clock())
    index = drawn_index(signer, stamp, slot)
    item = get_task("arith").item("train", index)
    prompt = [i + prompt_shift for i in tok(item.prompt).input_ids]
    ids = tok.convert_tokens_to_ids(completion_tokens)
    comps = [WireCompletion(ids, [-0.5] * len(ids), "length", 0.0),  # (one cap for the group: unpadded)
             WireCompletion(ids[::-1], [-0.5] * len(ids), "length", 0.0)]
    return encode_group(WireGroup("arith", "1", "train", index, prompt, comps, card, 0, float(stamp)))


@pytest.mark.parametrize("record, reason", [
    (lambda hub: bpe_group(hub, 1, ["12"] * 9), "length"),  # 9 of its tokens: more than we generate (8)
    (lambda hub: bpe_group(hub, 2, ["1"], prompt_shift=1), "prompt"),  # not the item's prompt in BPE ids
    (lambda hub: bpe_group(hub, 3, ["1"], fingerprint="0" * 16), "tokenizer"),  # not what zoo:bpe builds
    (lambda hub: bpe_group(hub, 4, ["1"], source="hub:swarm-node-tests/no-such-tokenizer"), "tokenizer"),
])
def test_hostile_foreign_tokenizer_records_are_refused(record, reason):
    """The foreign path keeps the same strictness: a completion longer than we would generate (in its tokens),
    a prompt that is not the item's, a tokenizer that is not the one its source builds, a source this machine
    cannot build (nothing is downloaded) are refused by reason; an honest one in the same bundle is used."""
    hub = MemorySwarm()
    victim = peer(hub, "victim")
    honest = bpe_group(hub, 5, ["1", "2"])
    publish_bundles(hub, "forger", card=bpe_card(), groups=pack_bundle([record(hub), honest], 10**6)[0])
    result = gather(victim, budget=100, sender_cap=1000)
    assert result.rejected == {reason: 1} and len(result.groups) == 1
    assert result.groups[0].foreign and result.groups[0].group.item.ref.index == pb.Group.FromString(
        honest).task.index
    assert victim.step(1).loss.sequences > 0  # and the peer trains on


def test_the_floor_lifts_a_partners_right_work_but_not_made_up_work():
    """verified-imitation's floor against a sender of right answers after made-up work (random
    characters, and another problem's right steps): the digits verifier checks the work, so those answers earn
    nothing, their groups carry no signal and nothing is lifted (nothing refused either: they are honest-looking
    records); an honest partner's right completions are lifted."""
    hub = MemorySwarm()

    def digits_peer(name: str, model: str, prompts: int) -> Peer:
        cfg = build_config({"model": {"name": model}, "task": {"name": "digits"},
                            "train": {"group_policy": "fixed", "group_size": 8, "prompts_per_step": prompts,
                                      "seed": zlib.crc32(name.encode()) % 1000},
                            "swarm": {"gather_deadline": 0.2, "shards_per_step": ANNOUNCE_SHARDS}})
        return Peer(cfg, transport=hub.transport(name))  # (verified-imitation: auto where the work is checked)

    victim = digits_peer("victim", "digit-add", 2)
    assert victim.transfer.name == "verified-imitation" and victim.transfer.floor == 1.0
    v = hostile.victim_for("digit-add", "digits", max_new_tokens=64)
    mallory, now = v.signed_by(b"mallory"), hub.clock()
    differences = [i for i in range(256)  # items mallory draws that digit-add's greedy answer fails
                   if v.task.problem("train", mallory.bind(i, now)[0])[1] == "-"][:6]
    made_up = [hostile.made_up_work(mallory, i, now, work=("random", "other")[k % 2])
               for k, i in enumerate(differences)]
    publish_bundles(hub, "mallory", groups=pack_bundle(made_up, 10**6)[0])
    try:
        r = victim.step(0)
        assert r.swarm.uninformative >= 1 and r.swarm.groups_used == 0 and r.swarm.rejected == {}
        assert r.loss.floored == 0
        hub.transport("mallory").withdraw()
        partner = digits_peer("partner", "digit-sub", 8)
        try:  # (items are drawn from identity and clock: a step whose 8 groups all score alike teaches nothing, so
            for step in range(6):  # the partner steps until one has a right and a wrong answer; bounded)
                partner.step(step)
                r = victim.step(step + 1)
                if r.swarm.groups_used:
                    break
            assert r.swarm.groups_used >= 1 and r.loss.floored >= 1  # (rows of a verifier that checks the work)
        finally:
            partner.close()
    finally:
        victim.close()


def test_a_peer_relays_only_for_owners_whose_live_announcement_names_it():
    hub = MemorySwarm()
    p = lone_peer(hub, "relay")
    t = hub.transport("natted")
    for kind in ("groups", "summaries"):
        t.serve(kind, msgpack.packb([]))
    refs = {kind: BundleRef(hub.served["natted"].latest(kind)[0], 1, 1) for kind in ("groups", "summaries")}
    for name, relays in (("natted", ("relay",)), ("elsewhere", ("someone-else",))):
        hub.transport(name).announce_async(encode_announcement(
            Announcement(name, (), 0, hub.clock(), zoo_card(), relays=relays, **refs)), 60)
    try:
        assert p.exchange.transport.relay_owners is None  # nothing read yet: the transport's default
        gather(p, budget=4, sender_cap=8)
        assert p.exchange.transport.relay_owners == {"natted": 1}  # (with the largest bundle it announced)
    finally:
        p.close()


def test_a_peer_that_dies_stops_being_counted_and_alone_is_said():
    """Its announcement stays in the directory until it expires; the first pull that fails after it died
    takes it out of `peers`, so `alone:` comes within a few steps (issue 26: it stayed counted ~40 steps)."""
    from node.observability.report import Presence

    hub = MemorySwarm()
    a, b = peer(hub, "survivor"), peer(hub, "dies", model="tiny-sub")
    for p in (a, b):
        p.step(0)
    assert gather(a, budget=8, sender_cap=8).peers == 1
    hub.served.pop(b.exchange.transport.peer_id)  # killed: no answer, its announcement still live
    presence, said, counts = Presence(), [], []
    for _ in range(8):
        counts.append(gather(a, budget=8, sender_cap=8).peers)
        said.append(presence.update(counts[-1]))
    assert counts[0] <= 1 and counts[1:] == [0] * 7
    assert any(line and line.startswith("alone:") for line in said[:7])
    assert len(a.exchange.ledger.live(hub.clock())) == 1  # still in the directory: only presence changed
    b.step(1)  # it comes back and announces again
    assert gather(a, budget=8, sender_cap=8).peers == 1


def test_credit_flows_back_to_the_sender_and_cannot_be_self_given_or_inflated():
    """b trains on a's groups and says so in its announcements; a reads it as 'given'. A peer cannot credit
    itself, and a claim beyond what we published is clamped."""
    hub = MemorySwarm()
    a, b = peer(hub, "giver"), peer(hub, "taker", model="tiny-sub")
    for step in range(3):
        a.step(step)
        b.step(step)
    a_id = a.exchange.transport.peer_id
    used = b.exchange.credit.given[a_id]
    assert used > 0
    b.step(3)  # announces what it trained on of a's so far (then takes more)
    m = a.step(3).swarm  # a reads that announcement
    assert (m.credited, m.credited_by) == (used, 1) == a.exchange.credit.claimed()
    card = zoo_card()
    ref = BundleRef(b"\0" * 16, 10, 1)
    liar = Announcement("liar", (), 0, hub.clock(), card, ref, ref, credits=(("liar", 10**6), (a_id, 10**6)))
    hub.transport("liar").announce_async(encode_announcement(liar), 60)
    a.step(4)
    credited, by = a.exchange.credit.claimed()
    assert by == 2 and credited == used + a.exchange.credit.published  # the lie clamped at what a ever published
    assert a.exchange.credit.published == 5 * 4 < 10**6


def test_the_credit_a_peer_gives_survives_its_restart(tmp_path):
    from node.persistence.checkpoint import resume_peer, save_checkpoint

    hub = MemorySwarm()
    a, b = peer(hub, "giver"), peer(hub, "taker", model="tiny-sub")
    for step in range(2):
        a.step(step)
        b.step(step)
    given = dict(b.exchange.credit.given)
    assert given and sum(given.values()) > 0
    point = save_checkpoint(b, tmp_path, 2, keep=1, history={})
    again = resume_peer(b.cfg, point, transport=hub.transport("taker"))
    assert dict(again.exchange.credit.given) == given  # announced on from there, not from 0


def test_an_announcement_naming_a_peer_id_its_key_does_not_own_is_refused_and_never_pulled():
    """Issue 54, 4: an identity announcing another peer's id (its addresses, or a ghost's) would aim every
    reader's pulls, and so its dials, wherever it likes. A key names only its own peer id: such an announcement
    is refused once ("identity") and its sender never learned."""
    hub = MemorySwarm()
    a, b = lone_peer(hub, "a"), lone_peer(hub, "b", model="tiny-sub")
    b.step(0)
    t = hub.transport("ghost")
    refs = {kind: BundleRef(t.serve(kind, msgpack.packb([])), 1, 1) for kind in ("groups", "summaries")}
    t.announce_async(encode_announcement(Announcement("b", (), 0, hub.clock(), zoo_card(), **refs)), 60)
    result = gather(a, budget=8, sender_cap=64)
    assert result.rejected == {"identity": 1} and b"ghost" not in a.exchange.ledger.known
    assert len(result.groups) == 4  # b's own announcement is its own: b's groups arrive


def test_a_distrusted_sender_leaves_the_view_and_does_not_come_back_through_others_views():
    """Measured in the catalogue (behave-matched-k8): 8 identities that behaved until established filled a
    peer's view and stayed there once distrusted, so it read no directory and took no push, and never found
    its honest partner again. A sender distrusted or demoted now leaves the view at the end of the step, and an
    entry of it that another's view brings is not taken (nor counted as refused)."""
    hub = MemorySwarm()
    a, b = lone_peer(hub, "a"), lone_peer(hub, "b", model="tiny-sub")
    for step in range(3):
        b.step(step)
        a.step(step)
    assert b"b" in a.exchange.gossip.membership.view
    a.exchange.ledger.distrusted["b"] = None  # (as the e-detector would)
    a.exchange.keep_view()
    assert b"b" not in a.exchange.gossip.membership.view and b"b" not in a.exchange.gossip.held
    value = hub.announcements[hub.transport("b").shard][b"b"][0]
    result = GatherResult()
    reject = functools.partial(a.exchange._reject, result)
    assert a.exchange.discovery._check_gossiped(b"b", value, reject) is None and not result.rejected


def test_a_peer_whose_steps_take_minutes_judges_freshness_in_its_own_steps(hub_and_peers):
    """Found running SmolLM2 and Gemma on worked answers (steps of 2-3 minutes on a CPU): every partner group was
    older than swarm.max_age (120 s) when pulled, and refused as `stale`. Freshness is now the longer of max_age
    and FRESH_STEPS of the receiver's own steps."""
    hub, a, b = hub_and_peers
    b.step(40)
    max_age = a.cfg.swarm.max_age

    def two_max_ages_old(m):
        m.created = float(int(hub.clock()) - 2 * max_age)

    refused = {}
    for own_step in (max_age / 2, max_age):  # 3 steps of a: 1.5 max_age (the group is older), then 3 max_age
        a.exchange.own_step_took(own_step)
        sender = f"slow-{next(IDENTITIES)}"
        publish_bundles(hub, sender, groups=pack_bundle([tamper(hub, two_max_ages_old, sender)], 10**6)[0])
        result = gather(a, 100, 1000)
        refused[own_step] = dict(result.rejected)
        hub.transport(sender).withdraw()
    assert refused == {max_age / 2: {"stale": 1}, max_age: {}}
    assert [r.group.item.ref.index for r in result.groups][-1:] == [drawn_index(sender.encode(), int(hub.clock()
                                                                                  - 2 * max_age), 0)]
    assert a.exchange.freshness.max_age == 3 * max_age
    # one window, read by the receiver, the directory and the gossip view alike
    assert a.exchange.receiver.freshness is a.exchange.directory.freshness is a.exchange.freshness
    assert a.exchange.gossip is None or a.exchange.gossip.freshness is a.exchange.freshness
    a.exchange.own_step_took(1.0)  # fast steps: max_age again
    assert a.exchange.freshness.max_age == max_age


def test_a_pause_between_a_peers_updates_does_not_age_the_groups_it_receives():
    """Found running SmolLM2 and Gemma on worked answers: SmolLM2's held-out evaluation after its step 3 took
    300 s, longer than 3 of its 81-s steps, and it refused as stale all 8 groups Gemma sent it, each of which had
    seen 1 or 2 of its updates. A group older than the window is now stale only if it was also created before
    the end of the receiver's third-latest update."""
    now = [1000.0]
    hub = MemorySwarm(clock=lambda: now[0])
    a, b = peer(hub, "a"), peer(hub, "b")
    b.step(0)  # (a record to restamp)
    step = a.cfg.swarm.max_age / 2  # a's steps: its window in seconds is 3 of them
    for end in (1060.0, 1120.0, 1180.0):  # a's three updates end
        now[0] = end
        a.exchange.own_step_took(step)
    now[0] = 1400.0  # after a pause of 220 s (an evaluation): no update since 1180
    refused = {}
    for created in (1100.0, 1050.0):  # after the end of a's third-latest update (1060), and before it
        sender = f"paused-{next(IDENTITIES)}"
        publish_bundles(hub, sender, groups=pack_bundle([tamper(hub, lambda m, c=created: setattr(m, "created", c),
                                                                sender)], 10**6)[0])
        refused[created] = dict(gather(a, 100, 1000).rejected)
        hub.transport(sender).withdraw()
    assert 3 * step < 1400.0 - 1100.0  # older than 3 of a's steps: stale before this change
    assert refused == {1100.0: {}, 1050.0: {"stale": 1}}
    assert a.exchange.freshness.group_window(1400.0) == 1400.0 - 1060.0
    assert a.exchange.freshness.max_age == 3 * step  # (announcements: judged as before)


def test_peers_whose_first_steps_outlast_max_age_see_each_other_in_their_first_steps():
    """Found running SmolLM2 and Gemma on worked answers (seed 6): until a peer's first step ended its windows
    were the configured 120 s, while that step took 6-7 minutes. SmolLM2's first announcement expired 120 s
    after it was made, and Gemma, which had read it when its own first step began, judged it stale 212 s later at
    its first gather; neither trained on the other's groups before its third step. A step that has generated for
    E seconds now counts as at least E long, for what it announces and what it gathers."""
    for fixed in (False, True):
        now = [1000.0]
        hub = MemorySwarm(clock=lambda now=now: now[0])
        a, b = peer(hub, "a"), peer(hub, "b")
        max_age = a.cfg.swarm.max_age
        if fixed:  # (before, the windows stayed at the configuration until the step ended)
            a.exchange.step_under_way(max_age)  # a generated for max_age, then publishes (in its step)
        a.step(0)
        now[0] += 2 * max_age  # b's first step began meanwhile and has generated for max_age
        if fixed:
            b.exchange.step_under_way(max_age)
        result = gather(b, 16, 64)
        assert (result.peers, len(result.groups)) == ((1, 4) if fixed else (0, 0)), (fixed, result)
        assert not result.rejected
    assert b.exchange.freshness.max_age == 3 * max_age  # and the step's end sets them from its length
    b.exchange.own_step_took(1.0)
    assert b.exchange.freshness.max_age == max_age


def test_slow_peers_keep_seeing_each_other_between_steps_longer_than_max_age():
    """The same run: a partner whose steps outlast swarm.max_age vanished between its announcements (its record
    expired after record_ttl, and a read found it stale). Slow peers announce for FRESH_STEPS of their steps and
    judge announcements the same way; fast ones are unchanged."""
    for slow in (False, True):
        now = [1000.0]
        hub = MemorySwarm(clock=lambda now=now: now[0])
        a, b = peer(hub, "a"), peer(hub, "b")
        max_age = a.cfg.swarm.max_age
        if slow:  # steps of one max_age each, as a CPU's on long answers
            a.exchange.own_step_took(max_age)
            b.exchange.own_step_took(max_age)
        b.step(0)
        now[0] += 2 * max_age  # b's next step is still under way
        result = gather(a, 16, 64)
        assert (result.peers, len(result.groups) > 0) == ((1, True) if slow else (0, False)), (slow, result)
        assert not result.rejected


def test_groups_are_judged_fresh_when_their_pull_arrived_not_when_a_slow_step_gets_to_them():
    """Found measuring false rejects in a mixed swarm of real models: a peer pulls while it generates
    (prefetch), and a slow one (Gemma 3 on a busy CPU) got to the bundles minutes later and refused honest groups
    as `stale`. Their age is now judged when the pull finished."""
    now = [1000.0]
    hub = MemorySwarm(clock=lambda: now[0])
    a, c = peer(hub, "a"), peer(hub, "c")
    a.step(0)
    gather(c, 16, 64)  # c learns a
    a.step(1)  # a's next groups, stamped now
    c.exchange.prefetch()  # c pulls them as its step begins, then generates for longer than max_age
    now[0] += 1.5 * c.cfg.swarm.max_age
    result = c.exchange.gather(budget=16, sender_cap=64)
    assert "stale" not in result.rejected and result.received > 0, (result.rejected, result.received)
