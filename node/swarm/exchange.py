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
import logging
import random
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path

from node.config import SwarmConfig, TrustConfig
from node.errors import first_line
from node.generation.rollouts import Group, Received, has_variance
from node.tasks import Task
from protocol import SHARD_LEVELS
from protocol.bundle2 import pack_groups, unpack_groups
from protocol.codec import (
    MAX_BUNDLE,
    MAX_CREDITS,
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
from .bounded import BoundedSet, remember
from .directory import RESCUE_STEPS, Directory
from .display import safe_text
from .draws import Draws
from .gossip import Gossip
from .membership import NEWCOMER_PUSH_FANOUT, PUSH_FANOUT
from .pulls import Pulls
from .queues import RoundRobin
from .receipts import Receipts
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


CREDIT_MEMORY = 4096  # peers remembered for the credit they gave us, and for the credit we give


def to_wire(group: Group, card: WireCard, step: int, created: float) -> WireGroup:
    """A group as it travels; created: the second its prompt was drawn (draws.py), which binds it to us."""
    ref = group.item.ref
    comps = [WireCompletion(c.token_ids, c.logprobs, c.finish_reason, c.reward) for c in group.completions]
    return WireGroup(ref.task, ref.version, ref.split, ref.index, group.prompt_ids, comps, card, step, created)


class GroupExchange:
    def __init__(self, transport: SwarmTransport, cfg: SwarmConfig, tokenizer, card: WireCard, eos_ids: set[int],
                 task: Task, max_new_tokens: int, sleep: Callable[[float], None] = time.sleep, seed: int = 0,
                 model: str = "", trust: TrustConfig | None = None,
                 informative: Callable[[list[float]], bool] = has_variance, receipts_file: Path | None = None):
        """task: the task this peer trains on (received references to it reuse it); max_new_tokens: this
        peer's generation limit, which no received completion may exceed; model: its name in announcements;
        trust: the sender ledger's bounds; informative: whether a received group with these rewards can teach
        (the transfer policy's; swarm.informative_only leaves the others out); receipts_file: where the signed
        receipts naming us are kept (None: nowhere)."""
        self.transport, self.cfg, self.tokenizer, self.card = transport, cfg, tokenizer, card
        self.informative = informative
        self.model = model
        self.accuracy = -1.0  # our latest held-out ID accuracy, announced (-1: not evaluated yet)
        self.published = 0  # own groups published in all (no one can credit us with more)
        self.given: collections.OrderedDict[str, int] = collections.OrderedDict()  # sender peer id -> its groups
        #                                  we trained on in all, the most recently used last (announced: credits)
        self.credited: collections.OrderedDict[str, int] = collections.OrderedDict()  # peer id -> our groups it
        #                                  says it trained on (its latest announcement; kept after it leaves)
        self.sleep = sleep
        self.limits = Limits(max_tokens=max_new_tokens)
        self.receiver = Receiver(tokenizer, frozenset(eos_ids), self.limits, task, cfg.max_age,
                                 ForeignTokenizers(card.tokenizer, max_new_tokens, cfg.foreign_tokenizers))
        self.rng = random.Random(seed)
        self.seen = BoundedSet(MEMORY)  # digests of records and group identities already handled
        self.draws = Draws(transport.own_subkey)  # the prompts we answer, bound to our identity
        self.done_bundles = BoundedSet(MEMORY)  # digests of bundles whose every record was handled
        self.summary_steps = BoundedSet(MEMORY)  # (sender, step) pairs whose summaries were counted
        self.logged = BoundedSet(4096)  # (sender, reason) already logged once
        self.pending: list = []  # futures of asynchronous publishes not yet collected
        self.prefetched: Future | None = None  # the announcement fetch started at the beginning of the step
        self.ledger = SenderLedger(KNOWN_SENDERS, self.rng, trust)
        self.pulls = Pulls(transport, self.ledger, self.rng,
                           {"groups": self.limits.max_bytes, "summaries": SUMMARY_BUNDLE_BYTES})
        self.task = SwarmTask(task.name, task.version, max_new_tokens)  # announced: a swarm trains one task
        self.directory = Directory(cfg, self.rng.randrange(SHARD_LEVELS[-1]), self.unusable_tokenizer, self.task)
        self.receipts = Receipts(transport, task.name, receipts_file)
        self.receipts_ref: BundleRef | None = None  # our receipts bundle's, as last served
        self.gossip_steps = 0  # steps whose view pulls we started (_start_gossip)
        self.gossip = Gossip(transport, random.Random(seed + 1), cfg.max_age) if cfg.gossip else None
        self._heard = 0  # pushes taken before this step (gossip.heard then)
        self._refused: dict[str, int] = {}  # streams our pull handler refused before this step, by reason
        self.maddrs = tuple(transport.visible_maddrs()[:MAX_MADDRS])

    @property
    def step(self) -> int:
        """The step under way (the one we last published at; the sender ledger keeps it)."""
        return self.ledger.step

    def unusable_tokenizer(self, card: WireCard) -> str:
        """Why a card's tokenizer cannot be used here ("" when it is ours, or foreign and usable)."""
        return self.receiver.foreign.unusable(card)

    def known_peers(self) -> list[dict]:
        """The other peers this one knows from their live announcements (for `swarm status`), the one whose
        newest announcement we read last first (our clock, never what a peer claims)."""
        from .control import peer_info

        now = self.transport.now()
        live = [self.ledger.known[k] for k in self.ledger.live(now)]
        return [peer_info(s.announcement, now - s.seen, s.established, s.failures,
                          used=self.given.get(s.announcement.peer_id, 0),
                          credited=self.credited.get(s.announcement.peer_id, 0), tokens=s.tokens,
                          receipted_rows=self.receipts.credit.by_receiver.get(s.announcement.peer_id, 0),
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
            self.receipts.published_group(wire.created, wire.index)
        bundle, unsent = pack_groups(wires, self.limits.max_bytes)
        sums = [encode_summary(s) for s in summaries]
        sum_bundle, _ = pack_bundle(sums, SUMMARY_BUNDLE_BYTES)
        ok = True
        self.ledger.begin_step(step)
        try:  # do not wait: training goes on meanwhile
            refs = {kind: BundleRef(self.transport.serve(kind, value), len(value), n)
                    for kind, value, n in (("groups", bundle, len(wires) - unsent),
                                           ("summaries", sum_bundle, min(len(sums), MAX_BUNDLE)))}
            receipts = self.receipts.issue(now)  # (the groups the last step trained on)
            if receipts is not None:
                self.receipts_ref = BundleRef(self.transport.serve("receipts", receipts), len(receipts),
                                              len(self.receipts.served))
            announcement = Announcement(self.transport.peer_id, self.maddrs, step, now, self.card, **refs,
                                        relays=self.relays(), model=self.model, accuracy=self.accuracy,
                                        credits=tuple(self.given.items())[-MAX_CREDITS:], task=self.task,
                                        receipts=self.receipts_ref)
            value = encode_announcement(announcement)
            if self.gossip is not None:
                self.gossip.serve(value, now, self.ledger.vouched(now))
            self.pending.append(self.transport.announce_async(value, self.cfg.record_ttl,
                                                              levels=self.directory.writes()))
        except (TimeoutError, OSError, RuntimeError, ValueError) as err:
            log.warning("announcing our groups failed (%s); training goes on", err)
            ok = False
        ok &= self._collect_publishes()
        self.published += len(wires) - unsent
        return PublishResult(len(wires) - unsent, unsent, ok, len(bundle) + len(sum_bundle))

    def credit(self) -> tuple[int, int]:
        """(our groups other peers say they trained on, how many peers say so): each peer's latest figure, at
        most what we published (a claim cannot exceed it), summed."""
        return sum(min(n, self.published) for n in self.credited.values()), len(self.credited)

    def relays(self) -> tuple[str, ...]:
        """In client mode (no inbound connections), the peers that relay pulls to us: the last ones we pulled
        from directly, which are reachable and hold a connection we opened."""
        return self.pulls.relays() if self.cfg.client_mode else ()

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
        """At the beginning of a step: starts reading the next announcement shards (one read in flight at a
        time, never doubled) and pulling from senders known already, so both work while we generate; while a
        seed's view is on its way (a newcomer's, or a stranded one's), the pulls wait for it (gather). A view that
        drained below pull_peers takes the entries we hold of our established senders first (no read, no check)."""
        seeded = self._start_gossip()  # (first: an initial peer's view on its way spares a whole read)
        self.receipts.collect(self.peer_id_of)
        self.receipts.start()
        if self.prefetched is None or self.prefetched.done():
            now = self.transport.now()
            if self.gossip is not None:
                self.gossip.refill(self.ledger.vouched(now), self.cfg.pull_peers)
            view = self.gossip.size() if self.gossip is not None else -1
            shards = self.directory.shards_to_read(now, len(self.ledger.live(now)), view, seeded,
                                                   self.ledger.helping(now))
            self.prefetched = self.transport.fetch_shards_async(shards) if shards else None
        if self.gossip is None or not self.gossip.seeding:  # (a seed's view on its way may name the senders
            self._start_pulls()  #                           that help: pulls then start once it is taken, in gather)

    def work_budget(self) -> WorkBudget:
        c = self.cfg
        return WorkBudget(c.max_records_per_step, c.max_bytes_per_step, c.max_receive_cpu)

    def gather(self, budget: int, sender_cap: int) -> GatherResult:
        """Fresh groups of other peers, up to `budget` groups and `sender_cap` completions from any one
        sender, waiting at most gather_deadline and working within the per-step budget; never spins."""
        result, work = GatherResult(), self.work_budget()
        queues = RoundRobin(self.rng, self.seen, self.done_bundles)
        taken = queues.taken  # sender -> completions accepted this step
        outcome: dict[bytes, list[int]] = collections.defaultdict(lambda: [0, 0, 0])  # accepted, informative,
        deadline = self.transport.now() + self.cfg.gather_deadline  #                    rejected
        self._collect_views(result)  # first: views pulled meanwhile (a newcomer's initial peers' too) may fill
        self._start_pulls()  # the senders they named, pulled while a slow directory read is awaited
        wait = 0.0 if self._view_full() else max(deadline - self.transport.now(), 0.0)  # a full view finds
        read = self._announcements(result, wait)  # senders: a slow directory read is taken when it lands
        if read is not None:
            self.directory.note_read(len(read))
            self.ledger.forget(getattr(read, "withdrawn", ()))  # withdrawn since we learned them
            self._learn(read, result)
            self.transport.relay_owners = self.relay_owners()
        self._start_pulls()  # senders learned just now
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
        if self.gossip is not None:
            heard = self.gossip.heard
            self._renew_view()
            result.view, result.pushes = self.gossip.size(), heard - self._heard
            self._heard = heard
        refused = self.transport.refused_streams()
        result.streams_refused = {k: n - self._refused.get(k, 0) for k, n in refused.items()
                                  if n > self._refused.get(k, 0)}
        self._refused = refused
        return result

    def keep_view(self) -> None:
        """One round of peer sampling without gathering groups, for a peer that serves and does not train (a
        benchmark's publishers): the view pulls started last round are taken, the view renewed, the next pulls
        and pushes started."""
        if self.gossip is None:
            return
        self._collect_views(GatherResult())
        self._renew_view()
        self._start_gossip()

    def _collect_views(self, result: GatherResult) -> None:
        """Takes the view pulls that finished (ours, pushers' and initial peers'): each entry checked as an
        announcement, its sender learned when new, refusals counted in `result`."""
        if self.gossip is not None:
            self.gossip.collect(lambda subkey, value: self._check_gossiped(subkey, value, result),
                                lambda sender, reason, detail: self._reject(result, sender, reason, detail))

    def _renew_view(self) -> None:
        """Ends the view's round: senders distrusted or demoted leave the view; pushes are taken only once we have
        2 established senders (a newcomer's pushes come from whoever watches for newcomers)."""
        known = self.ledger.known.items()
        self.gossip.drop([s for s, state in known if self.ledger.shunned(state.announcement.peer_id)])
        self.gossip.end_round(take_pushes=len(self.ledger.vouched(self.transport.now())) >= 2)

    def relay_owners(self) -> dict[str, int]:
        """The peers whose live announcement names us as a relay (the only owners our node relays pulls for),
        each with the largest bundle it announced (what a relayed pull of it may carry, dht.py)."""
        me, now = self.transport.peer_id, self.transport.now()
        return {s.announcement.peer_id: max(s.announcement.groups.size, s.announcement.summaries.size)
                for s in self.ledger.known.values() if me in s.announcement.relays and s.expires > now}

    def _announcements(self, result: GatherResult, wait: float) -> dict | None:
        """The announcements read this step (None: no read finished), waiting at most `wait` seconds: a read
        still running then is kept for the next step."""
        future, self.prefetched = self.prefetched, None
        if future is None:
            return None
        try:
            return future.result(timeout=wait)
        except TimeoutError:
            if not future.done():  # still running: taken when it lands
                self.prefetched = future
            else:
                log.debug("a directory read timed out (silent DHT nodes?); the next step reads again")
            result.late_fetches += 1
            return None
        except Exception as err:  # noqa: BLE001 (the network layer's failures must never stop training)
            log.warning("reading announcements failed (%s); this step trains on what it has", first_line(err))
            result.rejected["fetch"] += 1
            return None

    def _learn(self, records: dict, result: GatherResult) -> None:
        """Remembers the senders of valid, fresh announcements that speak our tokenizer; refuses the others,
        once per announcement."""
        now = self.transport.now()
        for sender, (value, expires) in records.items():
            if self.directory.read_before(value):
                continue
            announcement = self._check(sender, value, result)
            if announcement is not None:
                self.ledger.learn(sender, announcement, expires, seen=now)
                self._read_credit(sender, announcement)

    def _check(self, sender: bytes, value: bytes, result: GatherResult) -> Announcement | None:
        """An announcement whose signature holds, decoded and checked (directory.py): None when refused (counted
        the first time it is read) or stale."""
        checked = self.directory.check(value, self.transport.now())
        if isinstance(checked, tuple):
            self._reject(result, sender, *checked)
            return None
        if checked is None:  # stale, or refused when first read (a view may carry it again)
            return None
        if not self.transport.owns(sender, checked.peer_id):  # (else anyone could aim pulls at anyone)
            self._reject(result, sender, "identity", f"an announcement naming peer id {checked.peer_id[:16]!r}, "
                                                     f"which its signing key does not own")
            return None
        return checked

    def _check_gossiped(self, sender: bytes, value: bytes, result: GatherResult) -> Announcement | None:
        """A view entry's announcement (its signature checked by gossip.py): checked as one read from the DHT,
        and its sender learned when it is new to us."""
        new = not self.directory.read_before(value)
        announcement = self._check(sender, value, result)
        if announcement is not None and self.ledger.shunned(announcement.peer_id):
            return None  # (not a refusal: it stays out of our view, and is not pulled)
        if announcement is not None and new:
            self.ledger.learn(sender, announcement, announcement.created + self.cfg.max_age,
                               seen=self.transport.now())
            self._read_credit(sender, announcement)
        return announcement

    def _view_full(self) -> bool:
        """Peer sampling is on and our view holds at least as many peers as we pull from."""
        return self.gossip is not None and self.gossip.size() >= self.cfg.pull_peers

    def _start_gossip(self) -> bool:
        """Starts this step's view pulls: from established senders first; while our view is empty and none is
        established, from the senders we know from the DHT and from our initial peers (seeds), and from the seeds
        not asked yet while we are stranded (past our first step, within RESCUE_STEPS, no sender has helped).
        Returns whether a seed's view is on its way or brought entries."""
        if self.gossip is None:
            return False
        now = self.transport.now()
        present = [] if self.gossip.size() else self.ledger.present(now)
        self.gossip_steps += 1
        stranded = 2 <= self.gossip_steps <= RESCUE_STEPS and self.ledger.helping(now) == 0
        seeded = self.gossip.ask_seeds(stranded)
        vouched = self.ledger.vouched(now)
        self.gossip.start(vouched or present, self._gossip_route)
        self.gossip.push(present, self._gossip_route, PUSH_FANOUT if vouched else NEWCOMER_PUSH_FANOUT)
        self.gossip.hear()
        return seeded

    def _gossip_route(self, subkey: bytes) -> tuple[str, str, tuple[str, ...]] | None:
        """(peer id, relay, addresses) of a view pull to `subkey`, from its newest announcement we know."""
        state = self.ledger.known.get(subkey)
        if state is None:
            return None
        via, maddrs = self.pulls.route(state.announcement)
        return state.announcement.peer_id, via, maddrs

    def _start_pulls(self) -> None:
        """Starts pulling the latest bundles of newly chosen senders, up to swarm.pull_peers in flight."""
        self.pulls.start(self.step, self.cfg.pull_peers, self.cfg.explore_pulls)

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
        """An accepted group is trained on unless the transfer policy finds it uninformative (GRPO: equal rewards
        everywhere, zero advantage) and swarm.informative_only leaves those out; either way it counts for the
        sender's informative share."""
        sender = received.sender
        informative = self.informative(received.group.rewards)
        outcome[sender][0] += 1
        outcome[sender][1] += informative
        if informative or not self.cfg.informative_only:
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

    def _read_credit(self, sender: bytes, announcement: Announcement) -> None:
        """What an announcement says it trained on of ours (a peer cannot credit itself: protocol/codec.py); its
        receipts bundle is then pulled, and the signed receipts naming us are checked and kept (receipts.py)."""
        mine = [n for peer_id, n in announcement.credits if peer_id == self.transport.peer_id]
        if mine and announcement.peer_id != self.transport.peer_id:
            peer_id = announcement.peer_id
            remember(self.credited, peer_id, max(mine[0], self.credited.get(peer_id, 0)), CREDIT_MEMORY)
            if announcement.receipts is not None:
                self.receipts.want(sender, peer_id, announcement.receipts.digest, self.pulls.route(announcement))

    def trained_on(self, received: list[Received], step: int) -> None:
        """Notes the received groups this step trains on (after any gate): credit where it is due, announced with
        our next groups (credits) and signed, one receipt per generator (receipts.py)."""
        for r in received:
            peer_id = self.peer_id_of(r.sender)
            if peer_id:
                remember(self.given, peer_id, self.given.get(peer_id, 0) + 1, CREDIT_MEMORY)
                self.receipts.used(peer_id, r.group.item.ref.index, r.created, len(r.group.completions), step)

    def peer_id_of(self, sender: bytes) -> str:
        """The peer id a sender's newest announcement we know names ("" when none)."""
        state = self.ledger.known.get(sender)
        return state.announcement.peer_id if state is not None else ""

    def peer_name(self, sender: bytes) -> str:
        """How logs name a sender: its peer id (Qm..., as `swarm status` and the progress show it) when its
        announcement is known, else its identity key's digest."""
        state = self.ledger.known.get(sender)
        return state.announcement.peer_id if state is not None else f"with identity {sender[-12:].hex()}"

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
