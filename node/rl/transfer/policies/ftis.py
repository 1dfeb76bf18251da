"""F-TIS: filtered, truncated importance sampling (arXiv 2605.22537, the paper's equation)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from node.errors import ConfigError

from ..base import Decision, Rows, TransferPolicy, clamped_weights, weighted_centering


@dataclass
class FTIS(TransferPolicy):
    """F-TIS ("Harnessing Diverse Models in Collaborative GRPO", arXiv 2605.22537): each token weighs min(w, C),
    w = pi_theta / pi_gen (a constant: no gradient through it, as in TIS), GRPO's group-relative advantage, and
    the paper's filter: a row's advantage is zeroed when A <= 0 AND D >= g, D = sum over the completion of
    log pi_gen - log pi_theta (the paper writes D_KL(pi_theta || pi_gen) and does not say how it is estimated; this
    sample estimate of KL(gen || theta) is what its g = 50 implies). Departs only for foreign tokenizers (the
    paper has none): such a row takes one weight, exp(mean log-ratio), and its group's advantages are re-centred
    under those weights."""

    name: ClassVar[str] = "f-tis"
    summary: ClassVar[str] = ("received completions weigh pi_ours / pi_sender, at most C; a row at or below its "
                              "group's mean that diverges by g nats or more teaches nothing")
    weighted: ClassVar[bool] = True  # False: w = 1 on every token (NoIS and F-NoIS)
    truncated: ClassVar[bool] = True  # False: w is not truncated at C (VIS and F-VIS)
    rule: ClassVar[str] = "and"  # the filter: "and" (the paper's), "or" (the seed summary's), "" (none)

    trunc_c: float = 2.0  # C (paper: 2)
    g: float = 50.0  # the filter's threshold on D (paper: 50, with D a sum over tokens)
    divergence: str = "sum"  # D as the sum over the completion's tokens, or their mean ("mean")
    negative_c: float = 0.0  # hardening, off (0): received rows with A <= 0 weigh at most this instead of C
    sequence_weights: bool = False  # every received row takes one weight, exp(mean log-ratio), as foreign rows do
    foreign_centering: bool = True  # re-centre a foreign group's advantages under its rows' weights
    foreign_rows: str = "one"  # a foreign row counts once in the normaliser ("one") or as its weight ("weight")

    def __post_init__(self):
        if self.trunc_c <= 0 or self.g < 0 or self.negative_c < 0:
            raise ConfigError(f"transfer: {self.name} needs trunc_c > 0, g >= 0 and negative_c >= 0")
        if self.divergence not in ("sum", "mean") or self.foreign_rows not in ("one", "weight"):
            raise ConfigError("transfer.divergence must be sum or mean, transfer.foreign_rows one or weight")

    def weigh(self, rows: Rows) -> Decision:
        log_ratio = rows.log_ratio
        if self.sequence_weights:
            log_ratio = torch.where(rows.received[:, None], -rows.d_mean[:, None].expand_as(log_ratio), log_ratio)
        if not self.weighted:
            w = torch.ones_like(log_ratio)
        else:
            w = clamped_weights(log_ratio, rows.max_log_ratio, self.trunc_c if self.truncated else None)
        if self.weighted and self.negative_c:
            negative = ((rows.advantages <= 0) & ~rows.own)[:, None]
            w = torch.where(negative, w.clamp(max=self.negative_c), w)
        w, lifted = self.lift(w, rows)
        advantages = rows.advantages
        if self.weighted and self.foreign_centering and bool(rows.foreign.any()):
            advantages = weighted_centering(advantages, w[:, 0], rows.group, rows.foreign)
        filtered = self.filtered(advantages, rows)
        share = None
        if self.foreign_rows == "weight" and bool(rows.foreign.any()):
            share = torch.where(rows.foreign, w[:, 0].clamp(max=1.0), torch.ones_like(w[:, 0]))
        truncated = log_ratio.exp() > self.trunc_c if self.weighted and self.truncated else None
        return Decision(w, torch.where(filtered, torch.zeros_like(advantages), advantages), filtered, lifted,
                        truncated, share)

    def lift(self, w: torch.Tensor, rows: Rows) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Weights raised after the cap (none here: verified-imitation's floor), and the rows raised."""
        return w, None

    def filtered(self, advantages: torch.Tensor, rows: Rows) -> torch.Tensor:
        """[N] rows whose advantage the filter zeroes."""
        d = rows.d_sum if self.divergence == "sum" else rows.d_mean
        if self.rule == "and":
            return (advantages <= 0) & (d >= self.g) & rows.has_tokens
        if self.rule == "or":
            return (((advantages <= 0) & rows.received) | (d >= self.g)) & rows.has_tokens
        return torch.zeros_like(rows.has_tokens)
