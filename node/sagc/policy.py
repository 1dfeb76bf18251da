"""How a peer picks its group size each step (fixed G, the baseline, or SAGC) and how many prompts follow,
from length summaries of its own groups and, in the swarm, of other peers'.

A peer makes one summary per group it generates (protocol.codec.LengthSummary: the same type is gossiped),
feeds its own into its controller at full weight and publishes them; summaries of other peers count less, and
less again for another model family, whose length variability can differ (the straggler paper saw Llama and
Qwen differ). One sender's summaries of a step are scaled so that they carry at most
`max_sender_summaries * peer_weight` of evidence.
"""
from __future__ import annotations

import statistics
from typing import Protocol

from node.config import NodeConfig, SAGCConfig
from node.generation.rollouts import Group
from node.metrics import GroupMetrics
from protocol.codec import LengthSummary

from .controller import SAGC, straggles


class GroupPolicy(Protocol):
    """The seam between a peer's step and its group-size choice."""

    def choose(self) -> int:
        """This step's group size G."""
        ...

    def after_step(self, own: list[LengthSummary], others: dict[bytes, list[LengthSummary]],
                   family: str, seconds: float = 0.0) -> GroupMetrics:
        """Learns from this step's own summaries and other peers' new ones (by sender), and what our step cost:
        `seconds` of generation and learning (0: the generation seconds our summaries carry)."""
        ...

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


def summarize(group: Group, family: str, step: int = 0) -> LengthSummary:
    lengths = group.lengths
    return LengthSummary(group_size=len(lengths), max_len=max(lengths), median_len=float(statistics.median(lengths)),
                         mean_len=sum(lengths) / len(lengths), total_tokens=sum(lengths),
                         gen_seconds=group.gen_seconds, family=family, step=step)


def straggled(summary: LengthSummary, tau: float) -> bool:
    """The straggler rule (node.sagc.controller.straggles) from a summary alone."""
    return straggles(summary.max_len, summary.median_len, tau)


def summary_weight(summary: LengthSummary, own_family: str, own: bool, peer_weight: float,
                   other_family_weight: float) -> float:
    """Evidence weight in the controller: 1 for own groups, less for other peers, less again across families."""
    if own:
        return 1.0
    return peer_weight if summary.family == own_family else other_family_weight


def sender_scale(n_summaries: int, cap: int) -> float:
    """Scale of each summary of a sender that sent n this step: its summaries weigh as at most `cap` do."""
    return min(1.0, cap / n_summaries) if n_summaries else 0.0


def size_seconds(gen_seconds: float, learn_seconds: float, own_tokens: int, learned_tokens: int) -> float:
    """What our own groups cost a step, the price of their size (SAGC's `price_time`): generation, and the
    share of learning that is theirs (their tokens among all the tokens learned). Learning on received groups
    is not the size's doing: priced into it, a step that took 3 partners' long answers made its size look
    twice as dear as the larger size of the step before, and Gemma kept G = 12-16 in the swarm where alone it
    went down to 4 (7 seeds of SmolLM2 + Gemma on worked answers)."""
    share = min(1.0, own_tokens / learned_tokens) if learned_tokens > 0 else 1.0
    return gen_seconds + learn_seconds * share


def prompts_for(batch_mode: str, group_size: int, prompts_per_step: int, completions_per_step: int) -> int:
    """fixed_prompts: the prompt count is fixed and G scales the completions; fixed_completions: the
    completions per step stay about constant and the prompt count follows G."""
    if batch_mode == "fixed_prompts":
        return prompts_per_step
    return max(1, round(completions_per_step / group_size))


def straggler_rate(own: list[LengthSummary], tau: float) -> float:
    return sum(straggled(s, tau) for s in own) / max(len(own), 1)


class FixedGroups:
    """The baseline: the same G every step (straggler statistics are still reported)."""

    def __init__(self, group_size: int, tau: float):
        self.group_size, self.tau = group_size, tau

    def choose(self) -> int:
        return self.group_size

    def after_step(self, own: list[LengthSummary], others: dict[bytes, list[LengthSummary]],
                   family: str, seconds: float = 0.0) -> GroupMetrics:
        return GroupMetrics(straggler_rate=straggler_rate(own, self.tau))

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass


class SAGCGroups:
    """SAGC fed with own summaries (weight 1) and other peers' (weighted by model family, and scaled per sender)."""

    def __init__(self, cfg: SAGCConfig):
        self.cfg = cfg
        self.controller = SAGC(cfg)

    def choose(self) -> int:
        return self.controller.choose()

    def after_step(self, own: list[LengthSummary], others: dict[bytes, list[LengthSummary]],
                   family: str, seconds: float = 0.0) -> GroupMetrics:
        c = self.cfg
        weighted = [(s, 1.0, False) for s in own]
        sender_weights = [0.0]
        for summaries in others.values():
            scale = sender_scale(len(summaries), c.max_sender_summaries)
            weights = [scale * summary_weight(s, family, False, c.peer_weight, c.other_family_weight)
                       for s in summaries]
            weighted += [(s, w, True) for s, w in zip(summaries, weights, strict=True)]
            sender_weights.append(sum(weights))
        used = 0
        for s, weight, foreign in weighted:
            if s.group_size in self.controller.posteriors and weight > 0:
                self.controller.observe(s.group_size, straggled(s, c.tau), weight, foreign=foreign)
                used += 1
        if own:  # (one generate call made every group of our step: each summary carries its seconds)
            self.controller.observe_cost(own[0].group_size, seconds or own[0].gen_seconds)
        rate = straggler_rate(own, c.tau)
        self.controller.end_step(rate)
        return GroupMetrics(straggler_rate=rate, summaries_used=used,
                            max_sender_evidence=max(sender_weights), lam=self.controller.lam,
                            p_mean=self.controller.belief_means())

    def state_dict(self) -> dict:
        return self.controller.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.controller.load_state_dict(state)


def make_group_policy(cfg: NodeConfig) -> GroupPolicy:
    if cfg.train.group_policy == "fixed":
        return FixedGroups(cfg.train.group_size, cfg.sagc.tau)
    return SAGCGroups(cfg.sagc)
