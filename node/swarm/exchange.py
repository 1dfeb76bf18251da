"""Sharing groups with the swarm: publish ours, gather fresh ones from others, trust none of them.

The transport is a `SwarmTransport` (node/swarm/__init__.py): the DHT over hivemind (dht.py) or the
in-process MemorySwarm (memory.py); both are asynchronous, so tests take production's path. A peer serves
each step's bundles (groups in version 2's columnar, compressed layout, protocol/bundle2.py; summaries as a
msgpack list of encoded records, protocol/codec.py) and announces them in one small
signed DHT record; receivers read a few announcement shards per step and samples of other peers' views
(peer sampling, gossip.py: each peer serves a sample of its view and pulls two others'), remember the senders
they learn of (senders.py) and pull bundles peer to peer from a few of them (pulls.py; docs/PROTOCOL.md).

The trust boundary (docs/SECURITY.md) is boundary.py: every received record goes through its two pure steps
(decoded and validated under our limits; then checked for freshness and shape, its task reference, prompt and
answer rebuilt here and its completions re-scored by our verifier), and what fails is dropped and counted by
reason, once per record, never raised: a peer never crashes on what comes from the network. Between the two
steps this module refuses a group seen before: a group is identified by its content, not by the fields a
sender can restamp, and is used at most once. Other peers' tokenizers (swarm.foreign_tokenizers) are
retokenize.py's.

What one sender can cost or steer in a step is bounded: received records are taken round-robin across
senders (in a random order each step), one sender's accepted completions are capped relative to our own (and
all newcomers' together at swarm.explore_pulls times that: identities cost nothing, senders.py), and
the work spent on received records (records, bytes, CPU seconds, accepted or rejected alike) has a per-step
budget. Length summaries are de-duplicated per sender and step; node/sagc/policy.py bounds their weight.
"""
from __future__ import annotations

import collections
import functools
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from node.config import SwarmConfig, TrustConfig
from node.errors import first_line
from node.generation.rollouts import Group, Received, has_variance
from node.tasks import Task
from protocol.bundle2 import pack_groups, unpack_groups
from protocol.codec import (
    MAX_BUNDLE,
    MAX_MADDRS,
    Announcement,
    BundleRef,
    LengthSummary,
    Limits,
    RecordError,
    SwarmTask,
    WireCard,
    WireCompletion,
    WireGroup,
    bundle_digest,
    decode_summary,
    encode_announcement,
    encode_summary,
    group_identity,
    is_drawn,
    pack_bundle,
    unpack_bundle,
)

from . import SwarmTransport
from .boundary import Receiver, decode_received, rebuild_received
from .bounded import BoundedSet
from .credit import Credit
from .discovery import Discovery
from .display import safe_text
from .draws import Draws
from .freshness import Freshness
from .queues import RoundRobin
from .retokenize import ForeignTokenizers
from .senders import SenderLedger

log = logging.getLogger(__name__)
SUMMARY_BUNDLE_BYTES = 256 * 1024  # a peer's length summaries of one step (tens of bytes each)
MEMORY = 100_000  # records, groups and bundles remembered as already handled (each a 16-byte digest)
KNOWN_SENDERS = 4096  # senders remembered from their announcements


@dataclass
class GatherResult:
    groups: list[Received] = field(default_factory=list)
    summaries: dict[bytes, list[LengthSummary]] = field(default_factory=dict)  # sender -> its new summaries
    rejected: collections.Counter = field(default_factory=collections.Counter)  # reason -> records
    received: int = 0  # groups decoded for the first time this step
    senders: int = 0  # other peers whose groups were used this step
    bytes_in: int = 0
    polls: int = 0
    peers: int = 0  # other peers present at the last poll: a live announcement, and no pull failed since
    waited: float = 0.0  # seconds slept between polls (waiting for fresh groups, not work)
    budget_hit: str = ""  # the per-step work budget that ended processing ("records", "bytes", "cpu"), if any
    late_fetches: int = 0  # fetches not finished by the gather deadline (kept for the next poll or step)
    pull_failures: int = 0  # pulls that found the sender gone or unreachable (not counted as rejections)
    taken: dict[bytes, int] = field(default_factory=dict)  # sender -> completions accepted this step
    uninformative: int = 0  # valid received groups left out: equal rewards everywhere (informative_only)
    duplicates: int = 0  # groups seen before (a restarted peer's, or a copy): not used, held against no one
    view: int = 0  # peers in our peer-sampling view after this step (0: gossip off)
    pushes: int = 0  # pushes taken this step
    streams_refused: dict[str, int] = field(default_factory=dict)  # reason -> streams our pull handler refused
    received_from: collections.Counter = field(default_factory=collections.Counter)  # sender's name -> groups
    #   decoded for the first time (peer_name: its peer id once its announcement is known)
    refused_from: dict[str, collections.Counter] = field(default_factory=dict)  # sender's name -> reason -> records


@dataclass
class PublishResult:
    published: int  # own groups in the bundle
    unsent: int  # own groups left out by the size limit
    ok: bool  # no publish failed (those started earlier and finished since included)
    bytes_out: int


@dataclass
class WorkBudget:
    """Per-step bounds on the work spent on received records, rejected ones included."""

    records: int
    bytes: int
    cpu_seconds: float
    used_records: int = 0
    used_bytes: int = 0
    cpu_start: float = field(default_factory=time.thread_time)

    def charge(self, n_bytes: int, record: bool) -> None:
        self.used_bytes += n_bytes
        self.used_records += record

    def exhausted(self) -> str:
        """The name of the exhausted budget, or ""."""
        if self.used_records >= self.records:
            return "records"
        if self.used_bytes >= self.bytes:
            return "bytes"
        if time.thread_time() - self.cpu_start >= self.cpu_seconds:
            return "cpu"
        return ""


def make_card(model, tokenizer, backend: str, temperature: float, top_p: float, lora: bool,
              tokenizer_source: str = "") -> WireCard:
    from node import __version__
    from node.models.tokenizer import tokenizer_fingerprint

    return WireCard(family=getattr(model.config, "model_type", "unknown"),
                    n_params=sum(p.numel() for p in model.parameters()), lora=lora,
                    tokenizer=tokenizer_fingerprint(tokenizer), vocab_size=len(tokenizer), backend=backend,
                    temperature=temperature, top_p=top_p, software=__version__, tokenizer_source=tokenizer_source)


def to_wire(group: Group, card: WireCard, step: int, created: float) -> WireGroup:
    """A group as it travels; created: the second its prompt was drawn (draws.py), which binds it to us."""
    ref = group.item.ref
    comps = [WireCompletion(c.token_ids, c.logprobs, c.finish_reason, c.reward) for c in group.completions]
    return WireGroup(ref.task, ref.version, ref.split, ref.index, group.prompt_ids, comps, card, step, created)


class GroupExchange:
    def __init__(self, transport: SwarmTransport, cfg: SwarmConfig, tokenizer, card: WireCard, eos_ids: set[int],
                 task: Task, max_new_tokens: int, sleep: Callable[[float], None] = time.sleep, seed: int = 0,
                 model: str = "", trust: TrustConfig | None = None,
                 informative: Callable[[list[float]], bool] = has_variance, keep_uninformative: bool = False,
                 receipts_file: Path | None = None):
        """task: the task this peer trains on (received references to it reuse it); max_new_tokens: this
        peer's generation limit, which no received completion may exceed; model: its name in announcements;
        trust: the sender ledger's bounds; informative: whether a received group with these rewards can teach
        (the transfer policy's: it scores senders); keep_uninformative: groups that cannot teach are gathered too
        (else left out, and counted); receipts_file: where the signed receipts naming us are kept (None:
        nowhere)."""
        self.transport, self.cfg, self.tokenizer, self.card = transport, cfg, tokenizer, card
        self.informative, self.keep_uninformative = informative, keep_uninformative
        self.model = model
        self.accuracy = -1.0  # our latest held-out ID accuracy, announced (-1: not evaluated yet)
        self.sleep = sleep
        self.limits = Limits(max_tokens=max_new_tokens)
        self.freshness = Freshness.of(cfg)  # how old a received record may be, how long ours live (own_step_took)
        self.receiver = Receiver(tokenizer, frozenset(eos_ids), self.limits, task, self.freshness,
                                 ForeignTokenizers(card.tokenizer, max_new_tokens, cfg.foreign_tokenizers))
        self.rng = random.Random(seed)
        self.seen = BoundedSet(MEMORY)  # digests of records and group identities already handled
        self.draws = Draws(transport.own_subkey)  # the prompts we answer, bound to our identity
        self.done_bundles = BoundedSet(MEMORY)  # digests of bundles whose every record was handled
        self.summary_steps = BoundedSet(MEMORY)  # (sender, step) pairs whose summaries were counted
        self.logged = BoundedSet(4096)  # (sender, reason) already logged once
        self.pending: list = []  # futures of asynchronous publishes not yet collected
        self.ledger = SenderLedger(KNOWN_SENDERS, self.rng, trust)
        self.task = SwarmTask(task.name, task.version, max_new_tokens)  # announced: a swarm trains one task
        self.discovery = Discovery(transport, cfg, self.ledger, self.rng, self.task, self.unusable_tokenizer,
                                   {"groups": self.limits.max_bytes, "summaries": SUMMARY_BUNDLE_BYTES},
                                   random.Random(seed + 1), learned=lambda s, a: self.credit.read(s, a),
                                   freshness=self.freshness)
        self.directory, self.pulls, self.gossip = self.discovery.directory, self.discovery.pulls, self.discovery.gossip
        self.credit = Credit(transport, task.name, receipts_file, self.pulls.route)
        self._refused: dict[str, int] = {}  # streams our pull handler refused before this step, by reason
        self.maddrs = tuple(transport.visible_maddrs()[:MAX_MADDRS])

    @property
    def step(self) -> int:
        """The step under way (the one we last published at; the sender ledger keeps it)."""
        return self.ledger.step

    def step_under_way(self, seconds: float) -> None:
        """Our current step has run `seconds` before it shares: freshness covers steps at least that long
        (freshness.py) for what this step announces and gathers."""
        self.freshness.step_under_way(seconds)

    def own_step_took(self, seconds: float) -> None:
        """Our latest step took `seconds` and its update has ended: freshness in our own steps (freshness.py)
        for the groups and announcements we receive and the announcements we make."""
        self.freshness.own_step_took(seconds, self.transport.now())

    def unusable_tokenizer(self, card: WireCard) -> str:
        """Why a card's tokenizer cannot be used here ("" when it is ours, or foreign and usable)."""
        return self.receiver.foreign.unusable(card)

    def known_peers(self) -> list[dict]:
        """The other peers this one knows from their live announcements (for `swarm status`), the one whose
        newest announcement we read last first (our clock, never what a peer claims)."""
        from .control import peer_info

        now, credit = self.transport.now(), self.credit
        live = [self.ledger.known[k] for k in self.ledger.live(now)]
        return [peer_info(s.announcement, now - s.seen, s.established, s.failures,
                          used=credit.given.get(s.announcement.peer_id, 0),
                          credited=credit.credited.get(s.announcement.peer_id, 0), tokens=s.tokens,
                          receipted_rows=credit.receipts.credit.by_receiver.get(s.announcement.peer_id, 0),
                          capped_share=s.capped_share, mean_weight=s.mean_weight)
                for s in sorted(live, key=lambda s: -s.seen)]

    # ---- publishing -------------------------------------------------------------------------------------
    def draw_items(self, task: Task, split: str, n: int) -> list:
        """n training items of `task` for this step, drawn from our identity and the swarm's clock (draws.py):
        groups of other items are refused by every receiver as not ours."""
        return self.draws.items(task, split, n, self.transport.now())

    def publish(self, groups: list[Group], summaries: list[LengthSummary], step: int) -> PublishResult:
        """Publishes this step's groups (of items we drew: draw_items) and summaries; never raises for network
        trouble."""
        now = self.transport.now()
        wires = [to_wire(g, self.card, step, self.draws.stamp_of(g.item.ref.index)) for g in groups]
        for wire in wires:  # our own groups, echoed back by their generator (us), are duplicates
            self.seen.add(group_identity(wire))
            self.credit.receipts.published_group(wire.created, wire.index)
        bundle, unsent = pack_groups(wires, self.limits.max_bytes)
        sums = [encode_summary(s) for s in summaries]
        sum_bundle, _ = pack_bundle(sums, SUMMARY_BUNDLE_BYTES)
        ok = True
        self.ledger.begin_step(step)
        try:  # do not wait: training goes on meanwhile
            refs = {kind: BundleRef(self.transport.serve(kind, value), len(value), n)
                    for kind, value, n in (("groups", bundle, len(wires) - unsent),
                                           ("summaries", sum_bundle, min(len(sums), MAX_BUNDLE)))}
            receipts = self.credit.serve(now)  # (the groups the last step trained on)
            announcement = Announcement(self.transport.peer_id, self.maddrs, step, now, self.card, **refs,
                                        relays=self.discovery.relays(), model=self.model, accuracy=self.accuracy,
                                        credits=self.credit.credits(), task=self.task, receipts=receipts)
            value = encode_announcement(announcement)
            self.discovery.serve(value, now)
            self.pending.append(self.transport.announce_async(value, self.freshness.record_ttl,
                                                              levels=self.directory.writes()))
        except (TimeoutError, OSError, RuntimeError, ValueError) as err:
            log.warning("announcing our groups failed (%s); training goes on", err)
            ok = False
        ok &= self._collect_publishes()
        self.credit.published += len(wires) - unsent
        return PublishResult(len(wires) - unsent, unsent, ok, len(bundle) + len(sum_bundle))

    def _collect_publishes(self) -> bool:
        """Collects the outcome of the publishes that have finished (never waits); False if one failed."""
        ok, still = True, []
        for future in self.pending:
            if not future.done():
                still.append(future)
            elif future.cancelled() or future.exception() is not None or not future.result():
                ok = False
                if future.exception() is not None:
                    log.warning("an earlier publish failed: %s", future.exception())
        self.pending = still
        return ok

    # ---- gathering --------------------------------------------------------------------------------------
    def prefetch(self) -> None:
        """At the beginning of a step: starts discovery's reads and pulls (discovery.py) and the receipts' pulls,
        so that they work while we generate."""
        self.discovery.begin()
        self.credit.receipts.collect(self.peer_id_of)
        self.credit.receipts.start()

    def work_budget(self) -> WorkBudget:
        c = self.cfg
        return WorkBudget(c.max_records_per_step, c.max_bytes_per_step, c.max_receive_cpu)

    def gather(self, budget: int, sender_cap: int) -> GatherResult:
        """Fresh groups of other peers, up to `budget` groups and `sender_cap` completions from any one
        sender, waiting at most gather_deadline and working within the per-step budget; never spins."""
        result = GatherResult()
        queues = RoundRobin(self.rng, self.seen, self.done_bundles)
        taken = queues.taken  # sender -> completions accepted this step
        outcome: dict[bytes, list[int]] = collections.defaultdict(lambda: [0, 0, 0])  # accepted, informative,
        deadline = self.transport.now() + self.cfg.gather_deadline  #                    rejected
        reject = functools.partial(self._reject, result)
        self.discovery.take_views(reject)  # first: views pulled meanwhile may name senders, pulled at once
        late, failed = self.discovery.read(max(deadline - self.transport.now(), 0.0), reject)
        # The budget bounds the work on received records, so its clock starts here: checking a new partner's
        # announcement builds its tokenizer once (a GGUF one, Gemma's, takes 3-5 CPU seconds), which used to
        # spend the whole budget (2 s) before any of its records was read, so each SmolLM2 peer of the
        # SmolLM2 + Gemma swarm lost the step it first saw Gemma (node/models/loading.py caches what it builds).
        work = self.work_budget()
        result.late_fetches += late
        if failed:
            result.rejected["fetch"] += failed
        result.peers = len(self.ledger.present(self.transport.now()))
        interval = 0.05
        while True:
            result.polls += 1
            self._collect(queues, result, work)
            remaining = deadline - self.transport.now()
            self._take(queues, budget, sender_cap, result, work, outcome,  # newcomers after the others
                       newcomers_too=remaining <= 0 or not self.pulls.established_pending())
            result.budget_hit = work.exhausted()
            if len(result.groups) >= budget or not self.pulls or result.budget_hit or remaining <= 0:
                break
            pause = min(interval, remaining)
            self.sleep(pause)
            result.waited += pause
            interval = min(interval * 2, 1.0)  # adaptive back-off between polls
        result.senders = sum(1 for n in taken.values() if n > 0)
        result.taken = dict(taken)
        for sender, (accepted, informative, rejected) in outcome.items():
            if accepted:
                self.ledger.succeeded(sender, informative / accepted)
            elif rejected:
                self.ledger.failed(sender, self.step, refused=True)
        result.view, result.pushes = self.discovery.end()
        refused = self.transport.refused_streams()
        result.streams_refused = {k: n - self._refused.get(k, 0) for k, n in refused.items()
                                  if n > self._refused.get(k, 0)}
        self._refused = refused
        return result

    def keep_view(self) -> None:
        """One round of peer sampling without gathering groups (a benchmark's publishers: discovery.py)."""
        self.discovery.keep_view(functools.partial(self._reject, GatherResult()))

    def _collect(self, queues: RoundRobin, result: GatherResult, work: WorkBudget) -> None:
        """Takes the pulls that have finished: groups bundles into the round-robin queues, summaries to the
        controller; a failed pull is counted by reason and backs its sender off."""
        for sender, kind, bundle, arrived in self.pulls.finished():
            if isinstance(bundle, BaseException):
                self.ledger.failed(sender, self.step)
                if isinstance(bundle, RecordError) and bundle.reason != "missing":  # it broke the protocol
                    self._reject(result, sender, bundle.reason, f"pull: {bundle}")
                else:  # gone, withdrawn or unreachable: not a record to count, but not pulled again soon
                    result.pull_failures += 1
                    log.debug("pulling %s from sender %s failed: %s", kind, sender[:12], first_line(bundle))
                continue
            if kind == "summaries":
                self._summaries(sender, bundle, result, work)
            else:
                self._enqueue(sender, bundle, queues, result, work, arrived)

    def _enqueue(self, sender: bytes, value: bytes, queues: RoundRobin, result: GatherResult,
                 work: WorkBudget, arrived: float) -> None:
        """Unpacks a pulled bundle that is new to us (a bundle seen whole before costs one hash)."""
        bundle = bundle_digest(value)
        if bundle in self.done_bundles or work.exhausted():
            return
        work.charge(len(value), record=False)
        result.bytes_in += len(value)
        try:
            items = unpack_groups(value, self.limits)
        except RecordError as err:
            self.done_bundles.add(bundle)
            self._reject(result, sender, err.reason, str(err))
            return
        queues.add(sender, bundle, items, arrived)

    def _take(self, queues: RoundRobin, budget: int, sender_cap: int, result: GatherResult, work: WorkBudget,
              outcome: dict, newcomers_too: bool) -> None:
        """Takes records round-robin (queues.py) through the trust boundary into this step's groups, until the
        budget of groups or the work budget is spent."""
        def handle(sender: bytes, raw: bytes) -> None:
            duplicates = result.duplicates
            received = self._accept(result, sender, raw, work, queues.arrived(sender))
            if received is not None:
                self._use(received, result, queues.taken, outcome)
            elif result.duplicates == duplicates:  # refused (a duplicate is not held against its sender)
                outcome[sender][2] += 1

        queues.take(budget, sender_cap, self.cfg.explore_pulls, self.cfg.pull_peers, self.ledger.is_newcomer,
                    self.pulls.newcomer_pending(), newcomers_too,
                    lambda limit: len(result.groups) >= limit or bool(work.exhausted()), handle)

    def _use(self, received: Received, result: GatherResult, taken: collections.Counter, outcome: dict) -> None:
        """An accepted group is gathered unless it cannot teach (`informative`) and those are left out
        (keep_uninformative); either way it counts for the sender's informative share."""
        sender = received.sender
        informative = self.informative(received.group.rewards)
        outcome[sender][0] += 1
        outcome[sender][1] += informative
        if informative or self.keep_uninformative:
            result.groups.append(received)
            taken[sender] += len(received.group.completions)
        else:
            result.uninformative += 1

    def _accept(self, result: GatherResult, sender: bytes, raw: bytes, work: WorkBudget,
                arrived: float) -> Received | None:
        """The record (new to us) as a rebuilt, re-scored group, or None (rejected and counted): the trust
        boundary's two steps (boundary.py), a group seen before refused between them. Its age is judged at
        `arrived` (when its bundle's pull finished; our clock), not now."""
        work.charge(len(raw), record=True)
        try:
            wire, foreign = decode_received(raw, self.receiver)
        except RecordError as err:
            self._reject(result, sender, err.reason, str(err))
            return None
        if not is_drawn(sender, wire.created, wire.index):  # (before the memory: a copy marks nothing seen)
            self._reject(result, sender, "drawn", f"group {wire.task}/{wire.split}/{wire.index} is not one its "
                                                  f"sender drew: another peer's, re-published (draws.py)")
            return None
        if not self.seen.add(group_identity(wire)):  # its generator's group again (a restarted peer, or a copy
            result.duplicates += 1  #                  relayed whole): used once, held against no one
            return None
        result.received += 1
        result.received_from[self.peer_name(sender)] += 1
        try:
            return rebuild_received(wire, foreign, self.receiver, arrived or self.transport.now(), sender)
        except RecordError as err:
            self._reject(result, sender, err.reason, str(err))
            return None

    def trained_on(self, received: list[Received], step: int) -> None:
        """Notes the received groups this step trains on, after any gate (credit.py: announced and signed)."""
        self.credit.trained_on(received, step, self.peer_id_of)

    def peer_id_of(self, sender: bytes) -> str:
        """The peer id a sender's newest announcement we know names ("" when none)."""
        state = self.ledger.known.get(sender)
        return state.announcement.peer_id if state is not None else ""

    def peer_name(self, sender: bytes) -> str:
        """How logs name a sender: its peer id (Qm..., as `swarm status` and the progress show it) when its
        announcement is known, else its identity key's digest."""
        return self.peer_id_of(sender) or f"with identity {sender[-12:].hex()}"

    def _reject(self, result: GatherResult, sender: bytes, reason: str, detail: str) -> None:
        result.rejected[reason] += 1
        result.refused_from.setdefault(self.peer_name(sender), collections.Counter())[reason] += 1
        if self.logged.add((sender, reason)):  # once per sender and reason
            log.warning("rejected a record from peer %s: %s", safe_text(self.peer_name(sender), 64), detail)

    def _summaries(self, sender: bytes, value: bytes, result: GatherResult, work: WorkBudget) -> None:
        """A sender's pulled length summaries, each (sender, sender step) counted once."""
        bundle = bundle_digest(value)
        if work.exhausted() or not self.done_bundles.add(bundle):
            return
        work.charge(len(value), record=False)
        try:
            decoded = [decode_summary(raw) for raw in unpack_bundle(value, SUMMARY_BUNDLE_BYTES)]
        except RecordError as err:
            self._reject(result, sender, "summary", str(err))
            return
        fresh = [s for s in decoded if (sender, s.step) not in self.summary_steps]
        for s in fresh:
            self.summary_steps.add((sender, s.step))
        if fresh:
            result.summaries.setdefault(sender, []).extend(fresh)

    def close(self, timeout: float = 5.0) -> None:
        """Lets the last publishes land (at most `timeout` seconds in all), then withdraws our records."""
        deadline = time.monotonic() + timeout
        self.pulls.cancel()
        for future in self.pending:  # let the last publishes land before the tombstones
            try:
                error = future.exception(timeout=max(deadline - time.monotonic(), 0.01))
            except TimeoutError:
                error = "timed out"
            if error is not None:
                log.warning("a last publish did not finish: %s", error)
        try:
            self.transport.withdraw()
        except (TimeoutError, OSError, RuntimeError) as err:
            log.warning("withdrawing our records failed (%s); they will expire", err)
