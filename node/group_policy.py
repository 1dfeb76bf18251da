"""How a peer picks its group size each step: fixed G (the baseline) or SAGC, and how many prompts follow."""
from __future__ import annotations

from .config import NodeConfig
from .sagc import SAGC
from .summaries import LengthSummary, summary_weight


def prompts_for(batch_mode: str, group_size: int, prompts_per_step: int, completions_per_step: int) -> int:
    """fixed_prompts: the prompt count is fixed and G scales the completions; fixed_completions: the
    completions per step stay about constant and the prompt count follows G."""
    if batch_mode == "fixed_prompts":
        return prompts_per_step
    return max(1, round(completions_per_step / group_size))


class FixedGroups:
    """The baseline: the same G every step (straggler statistics are still reported)."""

    def __init__(self, group_size: int, tau: float):
        self.group_size, self.tau = group_size, tau

    def choose(self) -> int:
        return self.group_size

    def after_step(self, own: list[LengthSummary], others: dict[bytes, list[LengthSummary]], family: str) -> dict:
        rate = sum(s.straggled(self.tau) for s in own) / max(len(own), 1)
        return {"straggler_rate": rate}

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass


def sender_scale(n_summaries: int, cap: int) -> float:
    """Scale of each summary of a sender that sent n this step: its summaries weigh as at most `cap` do."""
    return min(1.0, cap / n_summaries) if n_summaries else 0.0


class SAGCGroups:
    """SAGC fed with own summaries (weight 1) and other peers' (weighted by model family, and scaled so that
    one sender's summaries of a step carry at most max_sender_summaries * peer_weight of evidence)."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.controller = SAGC(cfg)

    def choose(self) -> int:
        return self.controller.choose()

    def after_step(self, own: list[LengthSummary], others: dict[bytes, list[LengthSummary]], family: str) -> dict:
        """own: this step's summaries; others: other peers' new summaries by sender."""
        c = self.cfg
        weighted = [(s, 1.0, False) for s in own]
        sender_weights = [0.0]
        for summaries in others.values():
            scale = sender_scale(len(summaries), c.max_sender_summaries)
            weights = [scale * summary_weight(s, family, False, c.peer_weight, c.other_family_weight)
                       for s in summaries]
            weighted += [(s, w, True) for s, w in zip(summaries, weights)]
            sender_weights.append(sum(weights))
        used = 0
        for s, weight, foreign in weighted:
            if s.group_size in self.controller.posteriors and weight > 0:
                self.controller.observe(s.group_size, s.straggled(c.tau), weight, foreign=foreign)
                used += 1
        rate = sum(s.straggled(c.tau) for s in own) / max(len(own), 1)
        self.controller.end_step(rate)
        return {"straggler_rate": rate, "summaries_used": used, "max_sender_evidence": max(sender_weights),
                **self.controller.metrics()}

    def state_dict(self) -> dict:
        return self.controller.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.controller.load_state_dict(state)


def make_group_policy(cfg: NodeConfig):
    if cfg.train.group_policy == "fixed":
        return FixedGroups(cfg.train.group_size, cfg.sagc.tau)
    return SAGCGroups(cfg.sagc)
