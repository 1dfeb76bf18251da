"""Group-relative advantages (GRPO): each completion is compared with its own group only."""
from __future__ import annotations

import math


def group_advantages(rewards: list[float], eps_std: float) -> list[float]:
    """(r_i - mean(r)) / (std(r) + eps_std), with the population std of the group."""
    n = len(rewards)
    mean = sum(rewards) / n
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / n)
    return [(r - mean) / (std + eps_std) for r in rewards]


def has_variance(rewards: list[float]) -> bool:
    """DAPO drops groups whose rewards are all equal: they give no signal, only dilute the token mean."""
    return max(rewards) > min(rewards)
