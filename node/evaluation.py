"""Held-out accuracy: pass@1 on a fixed set of prompts of a task split, through the peer's own backend.

The set is the first `eval.prompts` items at indices from `HELD_OUT_START` on, which training never draws
(peer.py draws indices below 2^31), so every peer and every run evaluates the same prompts. A task's train
split is in distribution (arith: operands 0-19, which the zoo pre-trained on), its test split out of
distribution (arith: operands 20-99). Two figures per split: greedy pass@1 (one most-likely completion per
prompt) and sampled pass@1 (the mean reward of `eval.samples` completions per prompt at the training
temperature). Scores come from the task's own verifier, like training rewards.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from node.config import EvalConfig
from node.generation.rollouts import Completion, score_completion
from node.models.loading import encode_prompt
from node.tasks import Item, Task
from node.tasks.base import HELD_OUT_START, item_kind

EVAL_SEED = 7_777_777  # sampling seed of sampled pass@1 (the same for every evaluation of a run)


@dataclass(frozen=True)
class SplitScore:
    split: str
    prompts: int
    greedy: float  # greedy pass@1
    sampled: float | None  # sampled pass@1 (mean over samples and prompts); None: not measured (eval.samples 0)
    greedy_by_kind: tuple[tuple[str, float], ...] = ()  # greedy pass@1 per kind of item, where the task has kinds
    cut: float = 0.0  # share of the completions (greedy and sampled) that hit the length cap before they ended


def held_out_items(task: Task, split: str, n: int) -> list[Item]:
    """The n held-out items of a split, the same for every peer and run."""
    return [task.item(split, HELD_OUT_START + i) for i in range(n)]


def item_scores(task: Task, items: list[Item], groups: list[list[Completion]]) -> list[float]:
    """Each item's mean verifier score over its completions (a group per item)."""
    return [sum(score_completion(task, item, c) for c in group) / max(len(group), 1)
            for item, group in zip(items, groups, strict=True)]


def pass_at_1(task: Task, items: list[Item], groups: list[list[Completion]]) -> float:
    """Mean verifier score over every completion of every item (a group per item)."""
    scores = [score_completion(task, item, c) for item, group in zip(items, groups, strict=True) for c in group]
    return sum(scores) / len(scores) if scores else 0.0


def by_kind(task: Task, items: list[Item], scores: list[float]) -> tuple[tuple[str, float], ...]:
    """(kind, mean score) for each kind of item, sorted by kind; () for a task without kinds."""
    sums: dict[str, list[float]] = {}
    for item, score in zip(items, scores, strict=True):
        kind = item_kind(task, item)
        if kind is None:
            return ()
        sums.setdefault(kind, []).append(score)
    return tuple((kind, sum(v) / len(v)) for kind, v in sorted(sums.items()))


def cut_share(groups: list[list[Completion]]) -> float:
    """The share of completions that hit the length cap (finish reason "length"): a verifier scores them 0."""
    reasons = [c.finish_reason for group in groups for c in group]
    return sum(r == "length" for r in reasons) / len(reasons) if reasons else 0.0


def _complete(backend, prompts: list[list[int]], samples: int, greedy: bool, batch: int) -> list[list[Completion]]:
    """Completions for every prompt, `batch` sequences per generate call at most."""
    per_call = max(1, batch // samples)
    out = []
    for start in range(0, len(prompts), per_call):
        groups, _ = backend.generate(prompts[start:start + per_call], samples, seed=EVAL_SEED + start, greedy=greedy)
        out.extend(groups)
    return out


def evaluate(backend, tokenizer, task: Task, cfg: EvalConfig) -> tuple[list[SplitScore], float]:
    """Greedy and sampled pass@1 on each configured split the task has (sampled: unless eval.samples is 0);
    returns the scores and the seconds."""
    start = time.perf_counter()
    scores = []
    for split in cfg.splits:
        if split not in getattr(task, "splits", ()):
            continue
        items = held_out_items(task, split, cfg.prompts)
        prompts = [encode_prompt(tokenizer, item) for item in items]
        greedy_groups = _complete(backend, prompts, 1, True, cfg.batch)
        sampled_groups = _complete(backend, prompts, cfg.samples, False, cfg.batch) if cfg.samples else []
        greedy = item_scores(task, items, greedy_groups)
        sampled = pass_at_1(task, items, sampled_groups) if cfg.samples else None
        scores.append(SplitScore(split, len(items), sum(greedy) / max(len(greedy), 1), sampled,
                                 by_kind(task, items, greedy), cut_share(greedy_groups + sampled_groups)))
    return scores, time.perf_counter() - start


def as_metrics(scores: list[SplitScore]) -> dict[str, float]:
    """{"train/greedy": ..., "train/sampled": ..., "test/greedy": ..., "train/greedy.sum": ...}: the metrics
    file's and status's form (per kind: greedy pass@1 on that kind's items, where the task has kinds; no sampled
    figure where it was not measured)."""
    out = {f"{s.split}/{kind}": getattr(s, kind) for s in scores for kind in ("greedy", "sampled")
           if getattr(s, kind) is not None}
    out.update({f"{s.split}/greedy.{kind}": value for s in scores for kind, value in s.greedy_by_kind})
    return out

