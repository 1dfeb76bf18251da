"""Turns own and received groups into padded training tensors (pure: no model, no I/O).

Each group's advantages are its transfer policy's (node/rl/transfer: GRPO's group-relative ones unless the policy
says otherwise, e.g. verified-imitation's r - b on a received group)."""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import torch

from node.generation.rollouts import Group, Received

Advantages = Callable[[list[float], Received | None], list[float]]  # (a group's rewards, its provenance) -> [A]
# A learner pass keeps about this many bytes a token for each of its output logits and each unit of a layer's
# hidden state and feed-forward block (float32 values, their log-softmax and their gradients; measured on
# SmolLM2-135M and Gemma 3 270M LoRA and a zoo model: 2.0-3.1, 5.9-6.2 and 0.04 MiB a token)
BYTES_PER_UNIT = 24
LEARNER_MEMORY_SHARE = 0.25  # of the device's memory, what one pass may take when train.micro_batch_tokens is 0


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
    foreign: torch.Tensor  # [N] bool, a foreign-tokenizer row (one sequence-level weight: node/rl/transfer)
    sender: torch.Tensor  # [N] long, the row's index in senders_of(received); -1 for our own rows
    work_checked: torch.Tensor  # [N] bool, scored by a verifier that checks the work (node/tasks checks_work)

    def to(self, device) -> Batch:
        return Batch(*(getattr(self, f.name).to(device) for f in dataclasses.fields(self)))


def senders_of(received: list[Received]) -> list[bytes]:
    """The distinct senders of received groups, in order: a batch's sender index i is senders_of(...)[i]."""
    return list(dict.fromkeys(r.sender for r in received))


def build_batch(own: list[Group], received: list[Received], pad_id: int, advantages: Advantages,
                drop_flat: bool) -> Batch | None:
    """One row per completion, our own groups first; None when nothing is left. drop_flat: groups whose
    advantages are all zero are left out (DAPO: they give no gradient and would only dilute the token mean)."""
    index = {s: i for i, s in enumerate(senders_of(received))}
    entries = [(g, None) for g in own] + [(r.group, r) for r in received]
    rows, row_group, foreign, sender, checked = [], [], [], [], []
    for g, (group, provenance) in enumerate(entries):
        values = advantages(group.rewards, provenance)
        if drop_flat and not any(values):
            continue
        for completion, adv in zip(group.completions, values, strict=True):
            if completion.token_ids:
                rows.append((group.prompt_ids, completion, adv, provenance is None))
                row_group.append(g)
                foreign.append(provenance is not None and provenance.foreign)
                sender.append(-1 if provenance is None else index[provenance.sender])
                checked.append(provenance is not None and provenance.work_checked)
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
    values = torch.tensor([adv for _, _, adv, _ in rows], dtype=torch.float32)
    own_rows = torch.tensor([o for _, _, _, o in rows], dtype=torch.bool)
    return Batch(input_ids, attention, positions, mask, logp_gen, values, own_rows, torch.tensor(row_group),
                 torch.tensor(foreign, dtype=torch.bool), torch.tensor(sender, dtype=torch.long),
                 torch.tensor(checked, dtype=torch.bool))


def take_rows(batch: Batch, rows: torch.Tensor) -> Batch:
    """The given rows of a batch, trimmed to their own longest sequence and completion (a micro-batch pads only
    as far as its own rows need)."""
    width = int(batch.attention[rows].sum(dim=1).max())
    t_max = int(batch.mask[rows].sum(dim=1).max())
    return Batch(batch.input_ids[rows, :width], batch.attention[rows, :width], batch.positions[rows, :t_max],
                 batch.mask[rows, :t_max], batch.logp_gen[rows, :t_max], batch.advantages[rows], batch.own[rows],
                 batch.group[rows], batch.foreign[rows], batch.sender[rows], batch.work_checked[rows])


def automatic_token_budget(vocab: int, layers: int, width: int, ffn: int, memory_bytes: int) -> int:
    """Padded tokens one forward/backward pass may take so that what it keeps (BYTES_PER_UNIT a token for each of
    the vocab logits and each layer's width + ffn units) stays within memory_bytes; at least 1."""
    return max(1, int(memory_bytes // (BYTES_PER_UNIT * (vocab + layers * (width + ffn)))))


def micro_batches(widths: list[int], budget: int, shortest_first: bool = True) -> list[list[int]]:
    """Row indices in pieces whose padded size (rows x their longest width) stays within `budget` tokens, rows
    taken shortest first so that a piece pads little (one long completion does not pad the short rows beside
    it; shortest_first=False: in row order); a row longer than the budget is a piece of its own. budget 0: one
    piece, in row order."""
    if budget <= 0:
        return [list(range(len(widths)))] if widths else []
    pieces, current, longest = [], [], 0
    order = sorted(range(len(widths)), key=widths.__getitem__) if shortest_first else range(len(widths))
    for i in order:
        width = widths[i]
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
