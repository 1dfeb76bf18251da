"""A batch's plan: the guard, then the policy, once per batch from log-probs taken before the update.

Several updates on one batch (train.mini_batches) share the plan; the PPO ratio is what changes between them
(node/rl/loss.py). The learner calls `plan_loss` and never asks which policy runs.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from node.config import TrustConfig
from node.metrics import LossMetrics

from .base import Rows, TransferPolicy
from .guard import SenderJudge, guard


@dataclass
class LossPlan:
    """Which tokens count, their weights and the advantages after the policy's filter (all constant)."""

    mask: torch.Tensor  # [N, T] bool: tokens in the loss
    weight: torch.Tensor  # [N, T] the policy's per-token weights
    advantages: torch.Tensor  # [N] advantages, zeroed for filtered rows
    metrics: LossMetrics  # everything but loss, clip_frac and grad_norm
    share: torch.Tensor | None = None  # [N] each row's count in the normaliser (None: 1 each)

    def normaliser(self, rows: torch.Tensor | None = None) -> tuple[float, float]:
        """(rows, tokens) that the objective divides by for these rows (all rows: None): each row with tokens
        counts as its share (1 unless the policy gives foreign rows their weight's)."""
        mask = self.mask if rows is None else self.mask[rows]
        counts = mask.sum(dim=1).to(self.weight.dtype)
        if self.share is None:
            return float((counts > 0).sum()), float(counts.sum())
        share = self.share if rows is None else self.share[rows]
        return float((share * (counts > 0)).sum()), float((share * counts).sum())


def plan_loss(batch, logp_ref: torch.Tensor, policy: TransferPolicy, trust: TrustConfig,
              judge: SenderJudge | None, senders: list[bytes], max_log_ratio: float) -> LossPlan:
    """batch: node/rl/batching.Batch; logp_ref: our log-probs of its tokens before the update; senders: the
    batch's distinct senders (its `sender` column indexes them); judge: the sender ledger (None: none kept)."""
    logp_ref = logp_ref.detach()
    own = batch.own.bool()
    mask = batch.mask.bool() if policy.shares else batch.mask.bool() & own[:, None]  # alone: own rows only
    kept = guard(logp_ref, batch.logp_gen, mask, own, batch.group, batch.sender, senders, trust, judge,
                 batch.foreign)
    mask, foreign = kept.mask, batch.foreign.bool()
    log_ratio = logp_ref - kept.logp_gen
    if bool(foreign.any()):  # one weight per foreign row: exp(mean log-ratio) = exp(-D mean)
        log_ratio = torch.where(foreign[:, None], -kept.d_mean[:, None].expand_as(log_ratio), log_ratio)
    rows = Rows(log_ratio, mask, batch.advantages, own, kept.received, batch.group,
                foreign & kept.received & mask.any(dim=1),
                batch.work_checked.bool(), batch.sender, tuple(senders), kept.d_sum, kept.d_mean, max_log_ratio)
    decision = policy.weigh(rows)
    if judge is not None and senders:
        judge.judge_weights(dict(zip(senders, sender_weights(decision.weight, decision.truncated, mask, batch.sender,
                                                             len(senders)), strict=True)))
    return LossPlan(mask, decision.weight, decision.advantages, plan_metrics(rows, kept, decision), decision.share)


def sender_weights(weight: torch.Tensor, truncated: torch.Tensor | None, mask: torch.Tensor, sender: torch.Tensor,
                   n_senders: int) -> list[tuple[int, int, float]]:
    """For each sender index 0..n_senders-1: (its tokens in the loss, of which at the policy's weight cap, their
    summed weight). weight, truncated (None: no cap), mask: [N, T]; sender: [N], -1 for our own rows."""
    out = []
    for i in range(n_senders):
        tokens = mask & (sender == i)[:, None]
        capped = truncated & tokens if truncated is not None else torch.zeros_like(tokens)
        out.append((int(tokens.sum()), int(capped.sum()), float((weight * tokens.to(weight.dtype)).sum())))
    return out


def plan_metrics(rows: Rows, kept, decision) -> LossMetrics:
    mask, has_tokens, w = rows.mask, rows.has_tokens, decision.weight
    n_tok = mask.sum().clamp(min=1)
    d_sum, d_mean = kept.d_sum, kept.d_mean
    lifted = decision.lifted if decision.lifted is not None else torch.zeros_like(has_tokens)
    truncated = decision.truncated & mask if decision.truncated is not None else torch.zeros_like(mask)
    received = mask & rows.received[:, None]
    n_received = received.sum().clamp(min=1)
    return LossMetrics(
        sequences=int(has_tokens.sum()),
        tokens=int(mask.sum()),
        dropped_tokens=int(kept.dropped.sum()),
        implausible=int(kept.implausible.sum()),
        distrusted=int(kept.distrusted.sum()),
        filtered=int(decision.filtered.sum()),
        floored=int((lifted & has_tokens).sum()),
        kept=int((has_tokens & ~decision.filtered).sum()),
        filtered_frac=float(decision.filtered.sum() / has_tokens.sum().clamp(min=1)),
        mean_weight=float((w * mask.to(w.dtype)).sum() / n_tok),
        truncated_frac=float(truncated.sum() / n_tok),
        received_weight=float((w * received.to(w.dtype)).sum() / n_received),
        received_truncated=float((truncated & received).sum() / n_received),
        div_sum_mean=float(d_sum[has_tokens].mean()) if has_tokens.any() else 0.0,
        div_sum_max=float(d_sum[has_tokens].max()) if has_tokens.any() else 0.0,
        div_tok_mean=float(d_mean[has_tokens].mean()) if has_tokens.any() else 0.0,
    )
