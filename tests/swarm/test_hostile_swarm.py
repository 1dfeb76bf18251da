"""One hostile peer against a real swarm: a bootstrap and two honest `swarm join` processes on loopback, and an
attacker speaking our wire format through its own hivemind node (bench/attacks/hostile.py). Every attack goes through
the real network path; each test checks that the honest peers are alive, their steps stay short and their
memory flat, and that each hostile record is counted once, under its reason.

Issue points: 1 (task references), 2 (long completions), 3 (expensive references), 4 (unsigned stores),
6 (replays, future), 7 (forged summaries), 8 (counted once); other tokenizers (issue 14). Poisoning (5) is in
test_hostile_poison.py, process faults (9-12) in test_hostile_process.py.
"""
import time

import pytest

from bench.attacks import hostile
from node.app.local_swarm import SwarmProcesses
from node.config import SwarmConfig
from node.swarm.dht import SwarmDHT
from node.system.process import rss_mb
from protocol import ANNOUNCE_SHARDS

HONEST = ("honest-add", "honest-lora")
LIGHT = ["--task", "arith-add", "--steps", "0", "--set", "train.prompts_per_step=8",
         "--set", "swarm.received_groups=8", "--set", "swarm.gather_deadline=0.2",
         "--set", "swarm.whole_read_every=0"]  # each attack is a new identity, read at once: these tests measure
#                                                the intake, not how soon a small swarm finds a newcomer
MAX_STEP_SECONDS = 10.0  # honest steps take ~0.2 s here; the published stall took 31 s
MAX_RSS_GROWTH_MB = 150  # the published memory attack added 2.3 GB in 6 s


@pytest.fixture(scope="module")
def honest_swarm(tmp_path_factory, wait_steps):
    sp = SwarmProcesses(tmp_path_factory.mktemp("hostile"))
    sp.start_bootstrap("--status-every", "1")
    sp.start_peer(HONEST[0], "--model", "tiny-add", "--seed", "0", *LIGHT)
    sp.start_peer(HONEST[1], "--model", "tiny-add-lora", "--seed", "1", *LIGHT)
    try:
        for name in HONEST:
            wait_steps(sp, name, 5, timeout=180)
        yield sp, hostile.victim_for("tiny-add", "arith-add")
    finally:
        sp.stop()


@pytest.fixture
def swarm(honest_swarm):
    """The honest swarm and a new attacker identity for each test (the honest peers back off a sender of
    refused records, which would hide one test's attack behind the previous one's). Its groups are of items it
    drew itself (anyone can), so that what stops each attack is the check under test."""
    sp, victim = honest_swarm
    attacker = hostile.HostileDHT(SwarmConfig(initial_peers=(sp.address,)), card=victim.card)
    try:
        yield sp, attacker, victim.signed_by(attacker.own_subkey)
    finally:
        attacker.shutdown()


def exchange_goes_on(rows, last: int = 4) -> bool:
    """The honest exchange goes on: in the last steps, valid groups of the other peer passed the boundary (used,
    or uninformative: on arith-add many teach nothing, so "used" alone was 0 for 3-4 steps by chance in two of
    about eight CI runs)."""
    return sum(r.swarm.groups_used + r.swarm.uninformative for r in rows[-last:]) > 0


def brief(rows) -> str:
    """The sharing figures of each step, one line each (for a failure's message)."""
    keys = ("senders_used", "groups_received", "groups_used", "uninformative", "duplicates", "view", "peers",
            "pull_failures", "late_fetches", "polls", "wait_seconds", "rejected", "budget_hit", "streams_refused")
    return "\n".join(f"{r.step}: " + " ".join(f"{k}={getattr(r.swarm, k)}" for k in keys) for r in rows)


def run_steps(sp, steps: int, timeout: float = 180) -> dict[str, list[dict]]:
    """The honest peers' metrics of their next `steps` steps, with their peak RSS growth meanwhile (MB)."""
    start = {name: len(sp.metrics(name)) for name in HONEST}
    rss0 = {name: rss_mb(sp.peers[name].pid) for name in HONEST}
    growth = dict.fromkeys(HONEST, 0.0)
    deadline = time.monotonic() + timeout
    while any(len(sp.metrics(n)) < start[n] + steps for n in HONEST):
        for name in HONEST:
            assert sp.peers[name].poll() is None, f"{name} died: {sp.log_tail(name)}"
            growth[name] = max(growth[name], rss_mb(sp.peers[name].pid) - rss0[name])
        assert time.monotonic() < deadline, "the honest peers stalled"
        time.sleep(0.1)
    out = {name: sp.metrics(name)[start[name]:start[name] + steps] for name in HONEST}
    for name, rows in out.items():
        assert max(r.step_seconds for r in rows) < MAX_STEP_SECONDS, (name, rows[-1])
        assert growth[name] < MAX_RSS_GROWTH_MB, (name, growth[name])
    return out


def rejected(rows: list[dict], reason: str) -> int:
    return sum(r.swarm.rejected.get(reason, 0) for r in rows)


def test_task_references_that_would_load_or_build_anything_are_rejected_once(swarm):
    """Points 1 and 3: dataset-backed tasks (an offline receiver used to crash on them) and 20 reasoning-gym
    tasks (which used to cost a 31 s step) are refused without being built, each counted once: since a swarm
    trains one task (issue 55), as "other-task"."""
    sp, attacker, v = swarm
    records = hostile.task_references(v, hostile.HUB_TASKS + hostile.GYM_TASKS, attacker.now())
    assert attacker.publish_records("groups", records)
    out = run_steps(sp, 8)
    for rows in out.values():  # each refused at most once; a sender of nothing but refusals is backed off, so
        assert 0 < rejected(rows, "other-task") <= len(records) == 22  # not all of them need be looked at
        assert exchange_goes_on(rows), brief(rows)


def test_completions_longer_than_our_own_limit_are_rejected_and_memory_stays_flat(swarm):
    """Point 2: 1000-token completions (zoo peers generate 8) used to take a peer from 0.7 to 3 GB."""
    sp, attacker, v = swarm
    records = [r for i in range(20) for r in hostile.long_completions(v, attacker.now(), index=100 + i)]
    assert attacker.publish_records("groups", records)
    out = run_steps(sp, 8)  # checks the RSS growth and step time
    for rows in out.values():  # (at most once each; the sender is backed off, as above)
        assert 0 < rejected(rows, "length") <= 20


def test_other_tokenizer_groups_that_retokenize_past_our_limit_or_forge_a_tokenizer_are_refused(swarm):
    """Issue 14's path over the real network: groups claiming the zoo's BPE tokenizer (which the honest peers
    build) whose text comes to 16-120 characters (they generate 8 tokens) are "length"; the same under a
    fingerprint nothing builds are "tokenizer"; the peers go on training on each other's groups."""
    sp, attacker, v = swarm
    records = [r for i in range(6) for r in hostile.foreign_groups(v, attacker.now(), index=3000 + 2 * i)]
    assert attacker.publish_records("groups", records)
    out = run_steps(sp, 8)
    for rows in out.values():  # at most once each; the sender of nothing but refusals is backed off
        assert 0 < rejected(rows, "length") + rejected(rows, "tokenizer") <= len(records) == 12
        assert set().union(*(r.swarm.rejected for r in rows)) <= {"length", "tokenizer"}
        assert exchange_goes_on(rows), brief(rows)


def test_unsigned_and_far_future_stores_are_refused_and_the_swarm_goes_on(swarm):
    """Point 4: str and bytes subkeys without the owner marker, one shared expiration (this crashed the
    bootstrap's expiry heap), and a signed record expiring in 1e9 s: no honest node keeps any of them."""
    sp, attacker, _ = swarm
    hostile.unsigned_stores(attacker)
    observer = SwarmDHT(SwarmConfig(initial_peers=(sp.address,)))
    try:
        seen = observer.fetch_shards_async(list(range(ANNOUNCE_SHARDS))).result(30)
        assert all(isinstance(k, bytes) and k.startswith(b"[owner:") for k in seen)
        assert b"y" * 100 not in [value for value, _ in seen.values()]  # the 1e9-second record
        assert len(seen) >= 2  # the honest peers' announcements
    finally:
        observer.shutdown()
    out = run_steps(sp, 6)
    assert sp.bootstrap.poll() is None  # the bootstrap survived
    for rows in out.values():
        assert exchange_goes_on(rows) and rejected(rows, "fetch") == 0, brief(rows)


def test_replays_restamps_and_future_records_are_refused_once_each(swarm):
    """Point 6: an honest bundle replayed, re-stamped copies (front-running, issue 54) and a group from the
    future. A group is bound to the identity that drew its item (node/swarm/draws.py): another's, served as the
    attacker's own, is refused as not drawn by it, and none is trained on a second time."""
    sp, attacker, v = swarm

    honest = attacker.honest_records()
    assert len(honest) >= 8
    run_steps(sp, 3)  # both honest peers have now used (or published) every one of these groups
    now = attacker.now()
    copies = honest + [hostile.restamped(raw, 10**6 + i, now) for i, raw in enumerate(honest)]
    future = [hostile.plain(v, 50 + i, created=now + 3600) for i in range(3)]
    assert attacker.publish_records("groups", future + copies)
    out = run_steps(sp, 8)
    for rows in out.values():  # every record looked at is refused (a sender of nothing else is backed off
        assert 0 < rejected(rows, "drawn") <= len(copies)  # before all of them need be looked at)
        assert rejected(rows, "future") == len(future)
        assert sum(r.swarm.groups_used for r in rows) > 0  # honest groups still arrive


def test_forged_summaries_are_counted_once_per_step_with_bounded_weight(swarm):
    """Point 7: a flood of 'no stragglers at G=16' summaries, restamped every half second. One sender's
    evidence in a step stays at most max_sender_summaries x peer_weight (8 x 0.5 = 4 pseudo-observations)."""
    sp, attacker, _ = swarm
    start = {name: len(sp.metrics(name)) for name in HONEST}
    stored = 0
    for i in range(20):  # (a store can miss a replica on a loaded machine: the attack needs most, not all)
        stored += attacker.publish_records("summaries", hostile.summary_flood(step=10**6 + i))
        time.sleep(0.5)
    assert stored >= 15, stored
    for name in HONEST:
        rows = sp.metrics(name)[start[name]:]
        assert any(r.group.summaries_used > 256 for r in rows)  # the flood arrived ...
        assert max(r.group.max_sender_evidence for r in rows) == pytest.approx(8 * 0.5)  # ... capped


def test_a_bad_record_left_in_place_is_counted_once(swarm):
    """Point 8: re-polling used to count 384 bad records 2080 times."""
    sp, attacker, v = swarm
    bad = [hostile.padding_poison(v, 900 + i, attacker.now(), claims="low") for i in range(5)]
    assert attacker.publish_records("groups", bad)
    out = run_steps(sp, 15)
    for rows in out.values():
        assert rejected(rows, "logprob") == 5


def test_groups_over_the_budget_are_taken_round_robin_across_senders(swarm):
    """Received groups come from every sender, not from the first bundle: with a valid bundle of 64
    plausible groups from the attacker and 8 from the other honest peer, a step with a budget of 8 takes
    groups from both, and the attacker's completions never exceed our own (max_sender_share 1.0)."""
    sp, attacker, v = swarm
    now = attacker.now()
    records = [hostile.plain(v, 2000 + i, created=now) for i in range(64)]
    assert attacker.publish_records("groups", records)
    seen = {name: [] for name in HONEST}  # the new identity must first be found among the announcements (a
    for _ in range(4):  # shard read or two): up to 16 steps, bounded by steps, not seconds
        for name, rows in run_steps(sp, 4).items():
            seen[name] += rows
        if all(any(r.swarm.senders_used == 2 for r in rows) for rows in seen.values()):
            break
    for rows in seen.values():
        assert any(r.swarm.senders_used == 2 for r in rows), brief(rows)
