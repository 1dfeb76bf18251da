"""Turns groups into padded training tensors with group-relative advantages (pure: no model, no I/O).

Advantages (GRPO): each completion is compared with its own group only, unless the group carries a baseline
(a received group scored against our own greedy answer: swarm.received_baseline)."""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch

from node.generation.rollouts import Group, has_variance


def group_advantages(rewards: list[float], eps_std: float) -> list[float]:
    """(r_i - mean(r)) / (std(r) + eps_std), with the population std of the group."""
    n = len(rewards)
    mean = sum(rewards) / n
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / n)
    return [(r - mean) / (std + eps_std) for r in rewards]


def advantages_of(group: Group, eps_std: float) -> list[float]:
    """A group's advantages: against its baseline when it has one (r - b, unnormalised: the baseline is not
    an estimate from the group itself), otherwise group-relative."""
    if group.baseline is not None:
        return [r - group.baseline for r in group.rewards]
    return group_advantages(group.rewards, eps_std)


@dataclass
class Batch:
    input_ids: torch.Tensor  # [N, L] prompt + completion, right-padded
    attention: torch.Tensor  # [N, L]
    positions: torch.Tensor  # [N, T] index into input_ids of each completion token (0 where padded)
    mask: torch.Tensor  # [N, T] bool, real completion tokens
    logp_gen: torch.Tensor  # [N, T] behaviour log-probs (0 where padded)
    advantages: torch.Tensor  # [N]
    own: torch.Tensor  # [N] bool
    group: torch.Tensor  # [N] long, index of the row's group in the step
    sequence: torch.Tensor  # [N] bool, a foreign-tokenizer row (one sequence-level weight: node/rl/ftis.py)
    sender: torch.Tensor  # [N] long, the row's index in senders_of(groups); -1 for our own rows
    floorable: torch.Tensor  # [N] bool, scored by a verifier that checks the work (Group.work_checked): the rows
    #                          loss.received_floor may lift

    def to(self, device) -> Batch:
        return Batch(*(getattr(self, f.name).to(device) for f in dataclasses.fields(self)))


def senders_of(groups: list[Group]) -> list[Group]:
    """The first group of each distinct sender among received groups, in order: a batch's sender index i is
    the sender of senders_of(groups)[i] (and its evidence before the step)."""
    first = {}
    for group in groups:
        if group.sender is not None:
            first.setdefault(group.sender, group)
    return list(first.values())


def build_batch(groups: list[Group], pad_id: int, eps_std: float, drop_zero_variance: bool) -> Batch | None:
    """One row per completion; None when nothing is left (e.g. every group had equal rewards under DAPO)."""
    index = {g.sender: i for i, g in enumerate(senders_of(groups))}
    rows, row_group, foreign, sender, floorable = [], [], [], [], []
    for g, group in enumerate(groups):
        if drop_zero_variance and group.baseline is None and not has_variance(group.rewards):
            continue
        for completion, adv in zip(group.completions, advantages_of(group, eps_std), strict=True):
            if completion.token_ids:
                rows.append((group.prompt_ids, completion, adv, group.own))
                row_group.append(g)
                foreign.append(group.foreign)
                sender.append(index.get(group.sender, -1))
                floorable.append(group.work_checked)
    if not rows:
        return None
    width = max(len(p) + len(c.token_ids) for p, c, _, _ in rows)
    t_max = max(len(c.token_ids) for _, c, _, _ in rows)
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(rows), width), dtype=torch.long)
    positions = torch.zeros((len(rows), t_max), dtype=torch.long)
    mask = torch.zeros((len(rows), t_max), dtype=torch.bool)
    logp_gen = torch.zeros((len(rows), t_max), dtype=torch.float32)
    for i, (prompt, completion, _, _) in enumerate(rows):
        p, c = len(prompt), len(completion.token_ids)
        input_ids[i, : p + c] = torch.tensor(prompt + completion.token_ids)
        attention[i, : p + c] = 1
        positions[i, :c] = torch.arange(p, p + c)
        mask[i, :c] = True
        logp_gen[i, :c] = torch.tensor(completion.logprobs, dtype=torch.float32)
    advantages = torch.tensor([adv for _, _, adv, _ in rows], dtype=torch.float32)
    own = torch.tensor([o for _, _, _, o in rows], dtype=torch.bool)
    return Batch(input_ids, attention, positions, mask, logp_gen, advantages, own, torch.tensor(row_group),
                 torch.tensor(foreign, dtype=torch.bool), torch.tensor(sender, dtype=torch.long),
                 torch.tensor(floorable, dtype=torch.bool))


def take_rows(batch: Batch, rows: torch.Tensor) -> Batch:
    """The given rows of a batch, trimmed to their own longest sequence and completion (a micro-batch pads only
    as far as its own rows need)."""
    width = int(batch.attention[rows].sum(dim=1).max())
    t_max = int(batch.mask[rows].sum(dim=1).max())
    return Batch(batch.input_ids[rows, :width], batch.attention[rows, :width], batch.positions[rows, :t_max],
                 batch.mask[rows, :t_max], batch.logp_gen[rows, :t_max], batch.advantages[rows], batch.own[rows],
                 batch.group[rows], batch.sequence[rows], batch.sender[rows], batch.floorable[rows])


def micro_batches(widths: list[int], budget: int) -> list[list[int]]:
    """Consecutive row indices in pieces whose padded size (rows x their longest width) stays within `budget`
    tokens; a row longer than the budget is a piece of its own. budget 0: one piece."""
    if budget <= 0:
        return [list(range(len(widths)))] if widths else []
    pieces, current, longest = [], [], 0
    for i, width in enumerate(widths):
        if current and (len(current) + 1) * max(longest, width) > budget:
            pieces.append(current)
            current, longest = [], 0
        current.append(i)
        longest = max(longest, width)
    if current:
        pieces.append(current)
    return pieces


def mini_batches(n_rows: int, count: int) -> list[list[int]]:
    """Row indices of `count` optimiser updates on one batch: every count-th row, so that each update sees
    rows of every group (a group's rows are consecutive); fewer when there are fewer rows."""
    return [list(range(k, n_rows, count)) for k in range(min(count, n_rows))]
