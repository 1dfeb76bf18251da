"""Length summaries: what SAGC needs to know about a finished group, small enough to gossip.

A peer makes one per group it generates, feeds its own into its controller at full weight and (in the swarm)
publishes them; summaries of other peers count less, and less again for another model family, whose length
variability can differ (the straggler paper saw Llama and Qwen differ).
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass

from .rollouts import Group
from .sagc import straggles


@dataclass(frozen=True)
class LengthSummary:
    group_size: int  # G: completions in the group
    max_len: int  # tokens of the longest completion
    median_len: float  # median completion length in tokens
    mean_len: float
    total_tokens: int  # sum of completion lengths (the useful work)
    gen_seconds: float  # wall time of the generate call that produced the group
    family: str  # model family of the generator, e.g. "qwen2" or "llama"

    def straggled(self, tau: float) -> bool:
        """The straggler rule (node.sagc.straggles) from the summary alone."""
        return straggles(self.max_len, self.median_len, tau)


def summarize(group: Group, family: str) -> LengthSummary:
    lengths = group.lengths
    return LengthSummary(group_size=len(lengths), max_len=max(lengths), median_len=float(statistics.median(lengths)),
                         mean_len=sum(lengths) / len(lengths), total_tokens=sum(lengths),
                         gen_seconds=group.gen_seconds, family=family)


def summary_weight(summary: LengthSummary, own_family: str, own: bool, peer_weight: float,
                   other_family_weight: float) -> float:
    """Evidence weight in the controller: 1 for own groups, less for other peers, less again across families."""
    if own:
        return 1.0
    return peer_weight if summary.family == own_family else other_family_weight
