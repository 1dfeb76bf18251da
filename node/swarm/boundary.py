"""The trust boundary (docs/SECURITY.md): a received record's bytes in, a rebuilt, re-scored group or a reason out.

Two pure steps, and `admit`, the two together:
- `decode_received`: a record of another task than ours refused as such ("other-task": a swarm has one task), then
  the record decoded under our limits (protocol/codec.py: tokenizer, vocabulary, length
  within our own generation limit, plausible behaviour log-probs), with the sender's tokenizer when it is not
  ours and we may use it (node/swarm/retokenize.py), else "tokenizer";
- `rebuild_received`: freshness (neither from the future nor older than our window: freshness.py), a "stop"
  completion ending in an end token, no completion padded (an end token before its last token, or "length" completions
  cut at different lengths: an honest sampler stops at the first end token and cuts every completion of a group
  at one cap), the task reference's split one of our task's, the prompt ids equal to the item's prompt
  encoded with the sender's tokenizer, each completion
  decoded (and re-tokenized into ours when foreign) and re-scored by our verifier.
Every failure is a `RecordError` whose reason the exchange counts; nothing else escapes, whatever the record
holds (the task's own code runs on a hostile reference: what it raises is a refusal). The exchange
(node/swarm/exchange.py) calls the two steps with its memory of groups already handled between them, so a
replay costs no rebuild.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

from node.errors import first_line
from node.generation.rollouts import Completion, Group, Received, score_completion
from node.models.loading import encode_prompt
from node.tasks import Task, checks_work
from protocol import CLOCK_SKEW
from protocol.codec import Limits, RecordError, WireGroup, decode_group, peek

from .freshness import Freshness
from .retokenize import FOREIGN_TOKEN_FACTOR, Foreign, ForeignTokenizers, retokenize

log = logging.getLogger(__name__)
REFUSED_BECAUSE = {  # what a refusal after decoding means, by reason (for log lines)
    "future": "stamped in the future", "stale": "older than our freshness window",
    "shape": "a stop without an end token",
    "task": "not an item of our task we can rebuild", "prompt": "its prompt ids are not the item's prompt",
    "length": "longer than we generate (in its sender's tokens), or than 8x that in ours",
    "padded": "tokens after an end token, or completions cut at different lengths",
}


@dataclass(frozen=True)
class Receiver:
    """What a received record is checked against: ours (tokenizer, end tokens, limits, task, freshness) and the
    other tokenizers we may use."""

    tokenizer: object
    eos_ids: frozenset
    limits: Limits  # max_tokens: our own generation limit
    task: Task  # the task we train on (received references to it reuse it)
    freshness: Freshness  # shared with the rest of the peer (its group_window: how old a group may be)
    foreign: ForeignTokenizers


def decode_received(raw: bytes, rx: Receiver) -> tuple[WireGroup, Foreign | None]:
    """The record decoded, with the sender's tokenizer when it is not ours (None when it is), or RecordError."""
    card, task, version = peek(raw, rx.limits)
    if (task, version) != (rx.task.name, rx.task.version):
        raise RecordError("other-task", f"a group of task {task!r} (version {version!r}), not ours "
                                        f"({rx.task.name!r} version {rx.task.version!r}): a swarm trains one task")
    why = rx.foreign.unusable(card)
    if why:
        raise RecordError("tokenizer", why)
    foreign = rx.foreign.resolve(card) if card.tokenizer != rx.foreign.fingerprint else None
    wire = decode_group(raw, receiver_vocab=len(foreign.tokenizer) if foreign else len(rx.tokenizer),
                        limits=foreign.limits if foreign else rx.limits, tokenizer=card.tokenizer)
    return wire, foreign


def _refuse(wire: WireGroup, reason: str) -> RecordError:
    return RecordError(reason, f"group {wire.task}/{wire.split}/{wire.index} refused ({reason}): "
                               f"{REFUSED_BECAUSE.get(reason, reason)}")


def padded(wire: WireGroup, end_ids) -> bool:
    """Whether a group was padded after sampling (issue 54, 8): an end token (end_ids: tokens its sampler surely
    stops at) before a completion's last token (an honest sampler stops at the first), an end token ending a
    "length" completion, or "length" completions of different lengths, or a "stop" one longer than them (an
    honest sampler cuts every completion of a group at the one cap it generates with)."""
    cut = {len(c.token_ids) for c in wire.completions if c.finish_reason == "length"}
    if len(cut) > 1 or (cut and any(len(c.token_ids) > min(cut) for c in wire.completions)):
        return True
    return any(t in end_ids for c in wire.completions
               for t in (c.token_ids if c.finish_reason == "length" else c.token_ids[:-1]))


def rebuild_received(wire: WireGroup, foreign: Foreign | None, rx: Receiver, now: float,
                     sender: bytes = b"") -> Received:
    """The decoded group checked and rebuilt here: prompt and rewards ours, a foreign group's completions
    re-tokenized into our tokens, with its provenance (sender: its identity); or RecordError."""
    if wire.created > now + CLOCK_SKEW:
        raise _refuse(wire, "future")
    if now - wire.created > rx.freshness.group_window(now):
        raise _refuse(wire, "stale")
    stop_ids = foreign.stop_ids if foreign else rx.eos_ids
    if any(c.finish_reason == "stop" and c.token_ids[-1] not in stop_ids for c in wire.completions):
        raise _refuse(wire, "shape")
    if padded(wire, {foreign.tokenizer.eos_token_id} if foreign else rx.eos_ids):  # (what a sampler surely stops
        raise _refuse(wire, "padded")  #  at: a foreign model's other special tokens may be sampled, and not stop it)
    task = rx.task  # (decode_received refused every other task)
    if wire.task != task.name or task.version != wire.task_version or wire.split not in task.splits:
        raise _refuse(wire, "task")
    theirs = foreign.tokenizer if foreign else rx.tokenizer
    try:  # the task's own code runs on a hostile reference: whatever it raises is a refusal
        item = task.item(wire.split, wire.index)
        if encode_prompt(theirs, item) != wire.prompt_ids:
            raise _refuse(wire, "prompt")
        comps = []
        for c in wire.completions:
            text = theirs.decode(c.token_ids, skip_special_tokens=True)
            comp = Completion(c.token_ids, c.logprobs, c.finish_reason, text)
            if foreign:
                ours = retokenize(rx.tokenizer, text, c.finish_reason == "stop", float(sum(c.logprobs)),
                                  rx.limits.max_tokens * FOREIGN_TOKEN_FACTOR)
                if ours is None:
                    raise _refuse(wire, "length")
                comp.token_ids, comp.logprobs = ours
            comp.reward = score_completion(task, item, comp)  # our verifier, not theirs
            comps.append(comp)
    except RecordError:
        raise
    except Exception as err:  # noqa: BLE001 (see above)
        log.warning("rebuilding %s/%s/%s failed: %s", wire.task, wire.split, wire.index, first_line(err))
        raise _refuse(wire, "task") from None
    prompt = encode_prompt(rx.tokenizer, item) if foreign else list(wire.prompt_ids)
    return Received(Group(item, prompt, comps), sender, foreign=foreign is not None, work_checked=checks_work(task),
                    created=wire.created)


def admit(raw: bytes, rx: Receiver, now: float, sender: bytes = b"") -> Received:
    """A received record's bytes to a group this peer may train on, or RecordError (both steps, no memory)."""
    wire, foreign = decode_received(raw, rx)
    return rebuild_received(wire, foreign, rx, now, sender)
