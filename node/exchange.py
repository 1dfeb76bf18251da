"""Sharing groups with the swarm: publish ours, gather fresh ones from others, trust none of them.

The transport is anything with `publish / fetch / now / withdraw / own_subkey` (node/swarm_dht.py over
hivemind, or MemorySwarm below for tests). Each peer's record of a kind is a msgpack list of encoded wire
records (protocol/codec.py) from its latest step.

The trust boundary is here: every received group is decoded under a size budget and validated; its prompt and
answer are rebuilt from the task reference, its prompt ids must equal our own encoding of that prompt, and
its completions are re-scored by our verifier. What fails is dropped and counted by reason, never raised: a
peer never crashes on what comes from the network. Groups are used at most once and only while fresh.
"""
from __future__ import annotations

import collections
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from protocol.codec import (
    Limits,
    RecordError,
    WireCard,
    WireCompletion,
    WireGroup,
    WireSummary,
    decode_group,
    decode_summary,
    encode_group,
    encode_summary,
    pack_bundle,
    unpack_bundle,
)

from .config import SwarmConfig
from .models import encode_prompt
from .rollouts import Completion, Group
from .summaries import LengthSummary
from .tasks import UnknownTaskError, get_task

log = logging.getLogger(__name__)
SUMMARY_BUNDLE_BYTES = 256 * 1024  # a peer's length summaries of one step (tens of bytes each)


class MemorySwarm:
    """An in-process stand-in for the DHT with the same record semantics (per-peer subkeys, expiry)."""

    def __init__(self, clock: Callable[[], float] = time.time):
        self.clock = clock
        self.records: dict[str, dict[bytes, tuple[bytes, float]]] = collections.defaultdict(dict)

    def transport(self, name: str) -> MemoryTransport:
        return MemoryTransport(self, name.encode())


class MemoryTransport:
    def __init__(self, hub: MemorySwarm, subkey: bytes):
        self.hub, self.own_subkey = hub, subkey

    def now(self) -> float:
        return self.hub.clock()

    def publish(self, kind: str, value: bytes, ttl: float) -> bool:
        self.hub.records[kind][self.own_subkey] = (value, self.now() + ttl)
        return True

    def fetch(self, kind: str) -> dict[bytes, tuple[bytes, float]]:
        now = self.now()
        return {k: v for k, v in self.hub.records[kind].items() if k != self.own_subkey and v[1] > now and v[0]}

    def withdraw(self) -> None:
        for records in self.hub.records.values():
            records.pop(self.own_subkey, None)


@dataclass
class GatherResult:
    groups: list[Group] = field(default_factory=list)
    summaries: list[LengthSummary] = field(default_factory=list)  # other peers' length summaries
    rejected: collections.Counter = field(default_factory=collections.Counter)  # reason -> count
    received: int = 0  # groups seen for the first time this step
    bytes_in: int = 0
    polls: int = 0
    peers: int = 0  # other peers with a live group record at the last poll
    waited: float = 0.0  # seconds slept between polls (waiting for fresh groups, not work)


def make_card(model, tokenizer, backend: str, temperature: float, top_p: float, lora: bool) -> WireCard:
    from . import __version__
    from .tokenizer import tokenizer_fingerprint

    return WireCard(family=getattr(model.config, "model_type", "unknown"),
                    n_params=sum(p.numel() for p in model.parameters()), lora=lora,
                    tokenizer=tokenizer_fingerprint(tokenizer), vocab_size=len(tokenizer), backend=backend,
                    temperature=temperature, top_p=top_p, software=__version__)


def to_wire(group: Group, card: WireCard, step: int, created: float) -> WireGroup:
    ref = group.item.ref
    comps = [WireCompletion(c.token_ids, c.logprobs, c.finish_reason, c.reward) for c in group.completions]
    return WireGroup(ref.task, ref.version, ref.split, ref.index, group.prompt_ids, comps, card, step, created)


class GroupExchange:
    def __init__(self, transport, cfg: SwarmConfig, tokenizer, card: WireCard, eos_ids: set[int],
                 sleep: Callable[[float], None] = time.sleep, limits: Limits | None = None):
        self.transport, self.cfg, self.tokenizer, self.card = transport, cfg, tokenizer, card
        self.eos_ids, self.sleep, self.limits = eos_ids, sleep, limits or Limits()
        self.seen: collections.OrderedDict = collections.OrderedDict()  # used-once memory, bounded
        self.tasks: dict[str, object] = {}
        self.pending: list = []  # futures of asynchronous publishes not yet collected
        self.prefetched: dict = {}  # kind -> future of a fetch started at the beginning of the step
        self.logged: set[tuple[bytes, str]] = set()  # (sender, reason) already logged once

    # ---- publishing -------------------------------------------------------------------------------------
    def publish(self, groups: list[Group], summaries: list[LengthSummary], step: int) -> dict:
        """Publishes this step's groups and summaries; never raises for network trouble."""
        now = self.transport.now()
        records = [encode_group(to_wire(g, self.card, step, now)) for g in groups]
        bundle, unsent = pack_bundle(records, self.limits.max_bytes)
        sums = [encode_summary(WireSummary(s.group_size, s.max_len, s.median_len, s.mean_len, s.total_tokens,
                                           s.gen_seconds, s.family, step)) for s in summaries]
        sum_bundle, _ = pack_bundle(sums, SUMMARY_BUNDLE_BYTES)
        ok = self._previous_publish_ok()
        for kind, value in (("groups", bundle), ("summaries", sum_bundle)):
            try:
                if hasattr(self.transport, "publish_async"):  # do not wait: training goes on meanwhile
                    self.pending.append(self.transport.publish_async(kind, value, self.cfg.record_ttl))
                else:
                    ok &= self.transport.publish(kind, value, self.cfg.record_ttl)
            except (TimeoutError, OSError, RuntimeError) as err:
                log.warning("publishing %s failed (%s); training goes on", kind, err)
                ok = False
        return {"published": len(records) - unsent, "unsent": unsent, "publish_ok": ok,
                "bytes_out": len(bundle) + len(sum_bundle)}

    def _previous_publish_ok(self) -> bool:
        """Collects the outcome of earlier asynchronous publishes that have finished (never waits)."""
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
        """Starts fetching other peers' records now (the DHT works while we generate); gather uses them."""
        if hasattr(self.transport, "fetch_async"):
            self.prefetched = {kind: self.transport.fetch_async(kind) for kind in ("groups", "summaries")}

    def gather(self, budget: int) -> GatherResult:
        """Fresh groups of other peers, up to `budget`, waiting at most gather_deadline; never spins."""
        result = GatherResult()
        deadline = self.transport.now() + self.cfg.gather_deadline
        interval = 0.05
        while True:
            result.polls += 1
            peers = self._poll(result, budget)
            if len(result.groups) >= budget or peers == 0 or self.transport.now() >= deadline:
                break
            pause = min(interval, max(deadline - self.transport.now(), 0.0))
            self.sleep(pause)
            result.waited += pause
            interval = min(interval * 2, 1.0)  # adaptive back-off between polls
        self._gather_summaries(result)
        return result

    def _fetch(self, kind: str, result: GatherResult) -> dict:
        future = self.prefetched.pop(kind, None)
        try:
            if future is not None:  # started at the beginning of the step
                return future.result(timeout=max(self.cfg.gather_deadline, 10.0))
            return self.transport.fetch(kind)
        except Exception as err:  # noqa: BLE001 (the network layer's failures must never stop training)
            log.warning("fetching %s failed (%s); this step trains on what it has", kind, err)
            result.rejected["fetch"] += 1
            return {}

    def _poll(self, result: GatherResult, budget: int) -> int:
        records = self._fetch("groups", result)
        result.peers = len(records)
        for sender, (value, _) in records.items():
            if len(result.groups) >= budget:
                break
            result.bytes_in += len(value)
            try:
                items = unpack_bundle(value, self.limits.max_bytes)
            except RecordError as err:
                self._reject(result, sender, err.reason, str(err))
                continue
            for raw in items:
                if len(result.groups) >= budget:
                    break
                self._accept(result, sender, raw)
        return len(records)

    def _accept(self, result: GatherResult, sender: bytes, raw: bytes) -> None:
        try:
            wire = decode_group(raw, receiver_vocab=len(self.tokenizer), limits=self.limits)
        except RecordError as err:
            self._reject(result, sender, err.reason, str(err))
            return
        key = (sender, wire.step, wire.task, wire.split, wire.index, wire.created)
        if key in self.seen:
            return  # already used (or rejected) once
        self.seen[key] = None
        while len(self.seen) > 100_000:
            self.seen.popitem(last=False)
        result.received += 1
        group, reason = None, self._check(wire)
        if not reason:
            group, reason = self._rebuild(wire)
        if group is None:
            self._reject(result, sender, reason, f"group {wire.task}/{wire.split}/{wire.index}")
            return
        result.groups.append(group)

    def _check(self, wire: WireGroup) -> str:
        if self.transport.now() - wire.created > self.cfg.max_age:
            return "stale"
        if wire.card.tokenizer != self.card.tokenizer:
            return "tokenizer"  # policy: skip and count (token-level weights need identical token ids)
        for c in wire.completions:
            if c.finish_reason == "stop" and c.token_ids[-1] not in self.eos_ids:
                return "shape"
        return ""

    def _task(self, wire: WireGroup):
        if wire.task not in self.tasks:
            try:
                self.tasks[wire.task] = get_task(wire.task)
            except UnknownTaskError:
                self.tasks[wire.task] = None
        return self.tasks[wire.task]

    def _rebuild(self, wire: WireGroup) -> tuple[Group | None, str]:
        """The group with prompt and rewards rebuilt locally, or (None, reason)."""
        task = self._task(wire)
        if task is None or task.version != wire.task_version or wire.split not in task.splits:
            return None, "task"
        item = task.item(wire.split, wire.index)
        if encode_prompt(self.tokenizer, item) != wire.prompt_ids:
            return None, "prompt"
        comps = []
        for c in wire.completions:
            text = self.tokenizer.decode(c.token_ids, skip_special_tokens=True)
            comp = Completion(c.token_ids, c.logprobs, c.finish_reason, text)
            comp.reward = task.score(item, text, c.finish_reason == "stop")  # our verifier, not theirs
            comps.append(comp)
        return Group(item, list(wire.prompt_ids), comps, own=False,
                     meta={"family": wire.card.family, "sender_step": wire.step}), ""

    def _reject(self, result: GatherResult, sender: bytes, reason: str, detail: str) -> None:
        result.rejected[reason] += 1
        if (sender, reason) not in self.logged:  # once per sender and reason
            self.logged.add((sender, reason))
            log.warning("rejected a record from peer %s: %s", sender[-12:].hex(), detail)

    def _gather_summaries(self, result: GatherResult) -> None:
        for sender, (value, _) in self._fetch("summaries", result).items():
            try:
                for raw in unpack_bundle(value, SUMMARY_BUNDLE_BYTES):
                    s = decode_summary(raw, self.limits)
                    result.summaries.append(LengthSummary(s.group_size, s.max_len, s.median_len, s.mean_len,
                                                          s.total_tokens, s.gen_seconds, s.family))
            except RecordError as err:
                self._reject(result, sender, "summary", str(err))

    def close(self) -> None:
        for future in self.pending:  # let the last publishes land before the tombstones
            try:
                error = future.exception(timeout=5)
            except TimeoutError:
                error = "timed out"
            if error is not None:
                log.warning("a last publish did not finish: %s", error)
        try:
            self.transport.withdraw()
        except (TimeoutError, OSError, RuntimeError) as err:
            log.warning("withdrawing our records failed (%s); they will expire", err)
