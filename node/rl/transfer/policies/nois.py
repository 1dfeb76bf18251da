"""NoIS: received completions treated as if we had sampled them (the F-TIS paper's control)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from ..base import Decision, Rows, TransferPolicy


@dataclass
class NoIS(TransferPolicy):
    """NoIS, the off-policy control of the F-TIS paper (arXiv 2605.22537): every row, own or received, weighs 1,
    with GRPO's group-relative advantage and no filter: received completions are trained on as if we had sampled
    them. The paper shows it collapsing between different models; it is kept as that control."""

    name: ClassVar[str] = "nois"
    summary: ClassVar[str] = "received completions weigh 1, as if we had sampled them (the paper's control)"

    def weigh(self, rows: Rows) -> Decision:
        return Decision(torch.ones_like(rows.log_ratio), rows.advantages, torch.zeros_like(rows.has_tokens))
