"""Verified imitation: a partner's verified right answers on prompts our own greedy answer gets wrong."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from node.errors import ConfigError
from node.generation.rollouts import Received

from ..base import Rows
from .ftis import FTIS


@dataclass
class VerifiedImitation(FTIS):
    """Imitation of a partner's right answers where our own greedy answer fails (the node's own rule, not a paper's;
    success-gated transfer in the spirit of Mutual RL, arXiv 2605.07244). A received group is used when one of its
    completions scores above b, our greedy answer's reward on its prompt; its advantages are r - b (binary rewards:
    1 on right rows, exactly 0 on wrong ones); a right row whose work our verifier checks (node/tasks checks_work)
    and whose mean divergence is at most floor_div weighs at least `floor` (never above C). On received rows this
    is supervised imitation at weight 1-2: F-TIS's weight, filter and negative weighting never act there (own rows
    are F-TIS's, which this class extends)."""

    name: ClassVar[str] = "verified-imitation"
    summary: ClassVar[str] = ("a partner's right answers on prompts our greedy answer gets wrong are imitated at "
                              "weight 1 or more (advantage r - b, b our greedy answer's reward); its wrong ones "
                              "teach nothing; our own groups as f-tis")
    asks_greedy: ClassVar[bool] = True

    floor: float = 1.0  # a received right row weighs at least this (at most trunc_c)
    floor_div: float = 4.0  # ... when its per-token mean of log pi_gen - log pi_theta is at most this: text we
    #                         could nearly have written (made-up work before a right answer: 7.9-12 nats a token)

    def __post_init__(self):
        super().__post_init__()
        if self.floor < 0 or self.floor_div <= 0:
            raise ConfigError("transfer.floor must be >= 0 and transfer.floor_div > 0")

    def caveat(self, checks_work: bool) -> str:
        return "" if checks_work else "this task's verifier reads only the answer: no received row is lifted"

    def informative(self, rewards: list[float]) -> bool:
        """A group right everywhere (zero advantage to its sender) can still teach where we fail."""
        return max(rewards) > min(rewards) or max(rewards) > 0

    def admits(self, rewards: list[float], greedy: float) -> bool:
        return max(rewards) > greedy

    def advantages(self, rewards: list[float], received: Received | None, eps_std: float) -> list[float]:
        if received is None or received.greedy is None:
            return super().advantages(rewards, received, eps_std)
        return [r - received.greedy for r in rewards]

    def lift(self, w: torch.Tensor, rows: Rows) -> tuple[torch.Tensor, torch.Tensor | None]:
        lifted = (rows.advantages > 0) & rows.received & (rows.d_mean <= self.floor_div) & rows.work_checked
        if not self.floor:
            return w, torch.zeros_like(lifted)
        return torch.where(lifted[:, None], w.clamp(min=min(self.floor, self.trunc_c)), w), lifted
