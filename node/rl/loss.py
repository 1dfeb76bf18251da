"""The clipped policy-gradient objective every row is trained with, whatever taught its weight and advantage.

Objective per token (maximised; the returned loss is its negative):

    weight * min(R * A, clip(R, 1 - eps_low, 1 + eps_high) * A)

`weight` and A are the transfer policy's (node/rl/transfer: for F-TIS, weight = min(pi_theta / pi_gen, C) and
A group-relative), constants decided once per batch; R = pi_theta / pi_theta_old is the PPO ratio against the
learner's own pre-update policy (1 at a batch's first update). Shapes: n rows x T completion positions.
"""
from __future__ import annotations

import torch

from node.config import LossConfig


def surrogate(logp: torch.Tensor, logp_old: torch.Tensor, weight: torch.Tensor, advantages: torch.Tensor,
              mask: torch.Tensor, cfg: LossConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """[n, T] per-token objective w * min(R A, clip(R) A) (zero off the mask), and [n, T] bool: tokens whose
    ratio R = pi_theta / pi_theta_old was clipped."""
    log_ratio = (logp - logp_old).clamp(-cfg.max_log_ratio, cfg.max_log_ratio)
    ratio = log_ratio.exp()
    clipped = ratio.clamp(1 - cfg.eps_low, 1 + cfg.eps_high)
    adv = advantages[:, None]
    per_token = weight * torch.minimum(ratio * adv, clipped * adv) * mask.to(logp.dtype)
    return per_token, ((ratio - clipped).abs() > 0) & mask


def aggregate(per_token: torch.Tensor, mask: torch.Tensor, cfg: LossConfig, rows: float,
              tokens: float) -> torch.Tensor:
    """The objective of these rows as a share of an update over `rows` completions / `tokens` tokens (so that
    micro-batches of one update add up to it): GRPO, each completion's token mean over rows; DAPO, every
    token the same over tokens."""
    if cfg.aggregation == "grpo":
        counts = mask.sum(dim=1).clamp(min=1).to(per_token.dtype)
        return (per_token.sum(dim=1) / counts).sum() / max(rows, 1)
    return per_token.sum() / max(tokens, 1)
