"""Success-gated imitation: received right answers on prompts we fail, at weight 1."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from ..base import Decision, Rows, TransferPolicy


@dataclass
class SuccessGated(TransferPolicy):
    """Success-gated transfer ("outcome"; Mutual RL, arXiv 2605.07244): a received group is used only on prompts
    our greedy answer gets wrong (b < 1); of its completions only those that beat their group (A > 0, GRPO's
    group-relative advantage) teach, at weight 1; the others are filtered. It reads no log-probs: on received
    rows it is supervised imitation of verified answers, not importance-sampled RL. Own rows: weight 1, GRPO.
    Unlike verified-imitation it needs no verifier that checks the work, its advantage is GRPO's normalised one,
    and a group right everywhere teaches nothing."""

    name: ClassVar[str] = "success-gated"
    summary: ClassVar[str] = ("on prompts our greedy answer gets wrong, a partner's completions that beat their "
                              "group are learned at weight 1; the rest teach nothing")
    asks_greedy: ClassVar[bool] = True

    def admits(self, rewards: list[float], greedy: float) -> bool:
        return greedy < 1

    def weigh(self, rows: Rows) -> Decision:
        filtered = (rows.advantages <= 0) & rows.received & rows.has_tokens
        advantages = torch.where(filtered, torch.zeros_like(rows.advantages), rows.advantages)
        return Decision(torch.ones_like(rows.log_ratio), advantages, filtered)
