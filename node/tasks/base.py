"""Task references, items and the task interface.

A prompt crosses the network only as a `TaskRef`; every peer rebuilds the prompt and its ground truth from
it, so no peer ever has to trust another's answer or reward.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Protocol

HELD_OUT_START = 2**31  # first held-out item index; training draws indices in [0, 2^31) (node/peer.py)


@dataclass(frozen=True)
class TaskRef:
    task: str  # task name, e.g. "arith" or "gym:chain_sum"
    version: str  # generator / dataset version; a peer refuses references of another version
    split: str  # "train" or "test"
    index: int  # item index within the split (procedural tasks derive the item's seed from it)


@dataclass(frozen=True)
class Item:
    ref: TaskRef
    prompt: str  # compact prompt for the project's own tiny models (no chat template), e.g. "12+7="
    question: str  # natural-language question for instruction-tuned models (used with a chat template)
    answer: str  # ground truth, rebuilt locally


class Task(Protocol):
    name: str
    version: str
    splits: tuple[str, ...]

    def item(self, split: str, index: int) -> Item: ...

    # optional: max_new_tokens, the completion cap the task's answers need (completion_cap); kind(item), the
    # item's sort (e.g. digits: "sum" or "difference"), for held-out accuracy per kind (item_kind);
    # checks_work = True where `score` checks the work a completion shows, not only its answer (checks_work)

    def score(self, item: Item, completion: str, finished: bool) -> float:
        """Verifiable reward in [0, 1] of a decoded completion; `finished` is False for a length cut-off.

        Where completions show their work, check the work too, not only the answer: received completions are
        re-scored with this, and verified-imitation's floor (node/rl/transfer) lifts every received completion
        scored right, so a verifier that reads only the answer lets made-up work ride on it (docs/SECURITY.md,
        "Made-up work"; `digits` checks its steps, `work_fits`)."""
        ...


DEFAULT_MAX_NEW_TOKENS = 8  # a task's completion cap unless it names its own (short answers: arith, count)


def completion_cap(task: Task) -> int:
    """The completion length a task's answers need (its `max_new_tokens`, e.g. digits' worked columns), else
    DEFAULT_MAX_NEW_TOKENS; what generation.max_new_tokens = 0 stands for."""
    return int(getattr(task, "max_new_tokens", DEFAULT_MAX_NEW_TOKENS))


def checks_work(task: Task) -> bool:
    """Whether the task's verifier checks the work a completion shows (its `checks_work`; default False): only
    then may a received right answer be lifted to weight 1 (verified-imitation's floor), since a verifier that reads
    only the answer lets made-up text ride on it (docs/SECURITY.md, "Made-up work")."""
    return bool(getattr(task, "checks_work", False))


def item_kind(task: Task, item: Item) -> str | None:
    """The item's kind where the task sorts its items (an optional `kind` method), else None."""
    kind = getattr(task, "kind", None)
    return kind(item) if kind is not None else None


def item_seed(*parts) -> int:
    """A stable 63-bit seed from any printable parts (independent of PYTHONHASHSEED and platform)."""
    digest = hashlib.sha256("/".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1
