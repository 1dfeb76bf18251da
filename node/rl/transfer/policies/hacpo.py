"""HACPO: heterogeneous agents' samples at a clipped sequence ratio, scaled by their capability."""
from __future__ import annotations

import math
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import ClassVar

import torch

from node.errors import ConfigError
from node.generation.rollouts import Group, Received

from ..base import Decision, Rows, TransferPolicy

SENDERS_KEPT = 4096  # senders whose capability history is kept (the least recently seen forgotten first)


@dataclass
class HACPO(TransferPolicy):
    """HACPO (arXiv 2603.02604, as its code, HACRL-code's verl recipe, computes it): a received row weighs
    s^(1 + alpha) * k, with s = exp(mean log pi_ours - mean log pi_sender) clipped to [1 - delta, 1] (outside it
    the row gives no gradient: a foreign sample is never up-weighted) and k = the sender's capability over ours
    (each one's share of positive rewards over its last `window` steps) clamped to [0.1, 10]; advantages are
    (r - b) / (sd + eps) with b the group's mean of r / k and sd the unbiased std. Departs: s is taken once before
    the update (a constant, as F-TIS's w), where HACPO differentiates through the clipped ratio (equal gradients
    at the first update); own rows keep our token-level PPO clip, not its sequence-level one; a group is one
    sender's (vertical), so b > 1 falls back to the group's plain mean (HACPO: our own samples' mean there)."""

    name: ClassVar[str] = "hacpo"
    summary: ClassVar[str] = ("a received row weighs (its sequence ratio, clipped to [1 - delta, 1], outside it "
                              "nothing)^(1 + alpha) x the sender's capability over ours, clamped to [0.1, 10]")

    delta: float = 0.2  # the cross clip's width below 1 (HACRL-code: cross_clip_delta)
    alpha: float = 1.0  # the ratio's extra power (a constant factor: the code detaches it)
    max_abs_log_ratio: float = 10.0  # the sequence log-ratio is clamped to +-this before exp
    ratio_min: float = 0.1  # the capability ratio's clamp
    ratio_max: float = 10.0
    window: int = 5  # steps a capability is averaged over
    epsilon: float = 1e-6  # added to the std in the advantage
    _history: OrderedDict = field(default_factory=OrderedDict, init=False, repr=False, compare=False)

    def __post_init__(self):
        if not (0 <= self.delta <= 1 and self.alpha >= 0 and 0 < self.ratio_min <= self.ratio_max
                and self.window >= 1 and self.epsilon > 0 and self.max_abs_log_ratio > 0):
            raise ConfigError("transfer: hacpo needs delta in [0, 1], alpha >= 0, 0 < ratio_min <= ratio_max, "
                              "window >= 1, epsilon > 0 and max_abs_log_ratio > 0")

    def begin_step(self, own: list[Group], received: list[Received]) -> None:
        """Each party's share of positive rewards this step joins its history (ours under the key None)."""
        parties: dict[bytes | None, list[float]] = {None: [r for g in own for r in g.rewards]} if own else {}
        for r in received:
            parties.setdefault(r.sender, []).extend(r.group.rewards)
        for key, rewards in parties.items():
            history = self._history.pop(key, None) or deque(maxlen=self.window)
            history.append(max(sum(x > 0 for x in rewards) / len(rewards), 1e-8))
            self._history[key] = history
        while len(self._history) > SENDERS_KEPT:
            self._history.popitem(last=False)

    def capability_ratio(self, sender: bytes) -> float:
        """The sender's capability over ours, clamped (1 for a party not seen yet)."""
        def capability(key):
            history = self._history.get(key)
            return max(sum(history) / len(history), 1e-8) if history else 1.0

        return min(max(capability(sender) / capability(None), self.ratio_min), self.ratio_max)

    def advantages(self, rewards: list[float], received: Received | None, eps_std: float) -> list[float]:
        n = len(rewards)
        mean = baseline = sum(rewards) / n
        if received is not None and max(rewards) > min(rewards):
            weight = 1.0 / self.capability_ratio(received.sender)
            weighted = sum(r * weight for r in rewards) / n
            baseline = weighted if weighted <= 1.0 else mean
        sd = math.sqrt(sum((r - mean) ** 2 for r in rewards) / (n - 1)) + self.epsilon if n > 1 else 1.0
        return [(r - baseline) / sd for r in rewards]

    def weigh(self, rows: Rows) -> Decision:
        log_s = (-rows.d_mean).clamp(-self.max_abs_log_ratio, self.max_abs_log_ratio)
        s = log_s.exp()
        clipped = s.clamp(1.0 - self.delta, 1.0)
        ratios = torch.tensor([self.capability_ratio(sender) for sender in rows.senders] + [1.0], dtype=s.dtype,
                              device=s.device)
        kappa = ratios[rows.sender]  # (index -1, our own rows, reads the appended 1)
        row_weight = torch.where(rows.received, clipped ** (1.0 + self.alpha) * kappa, torch.ones_like(s))
        filtered = rows.received & rows.has_tokens & ((s < 1.0 - self.delta) | (s > 1.0))
        advantages = torch.where(filtered, torch.zeros_like(rows.advantages), rows.advantages)
        weight = row_weight[:, None].expand_as(rows.log_ratio).to(rows.log_ratio.dtype)
        return Decision(weight.clone(), advantages, filtered)
