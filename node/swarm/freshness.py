"""How long records stay fresh at one peer: a single object read by everything that judges an age or sets one.

A received group or announcement is stale once older than `max_age`, and the peer's own announcement lives
`record_ttl`; they start at swarm.max_age and swarm.record_ttl. A peer whose steps are long (a CPU, a large model,
long answers) lengthens both to FRESH_STEPS of its own steps (`own_step_took`): staleness bounds off-policy drift,
which is counted in the receiver's updates, not in seconds. Judged in seconds alone, such a peer would refuse
every partner's groups (all older than swarm.max_age when pulled) and lose sight of partners whose announcements
expire between its steps. Fast peers keep the configured values.
"""
from __future__ import annotations

import math

from protocol import MAX_RECORD_TTL

FRESH_STEPS = 3  # records stay fresh for this many of our own steps when those outlast the configured seconds


def in_own_steps(configured: float, step_seconds: float, ceiling: float = math.inf) -> float:
    """The longer of `configured` seconds and FRESH_STEPS steps of `step_seconds` each, at most `ceiling`."""
    return min(ceiling, max(configured, FRESH_STEPS * step_seconds))


class Freshness:
    def __init__(self, max_age: float, record_ttl: float):
        """max_age, record_ttl: the configured seconds (swarm.max_age, swarm.record_ttl), never shortened."""
        self.configured = (max_age, record_ttl)
        self.max_age, self.record_ttl = max_age, record_ttl

    @classmethod
    def of(cls, cfg) -> Freshness:
        """From a SwarmConfig."""
        return cls(cfg.max_age, cfg.record_ttl)

    def own_step_took(self, seconds: float) -> None:
        """Our latest step took `seconds`: received records stay fresh, and ours live, FRESH_STEPS such steps
        where that is longer than configured (our records at most MAX_RECORD_TTL, which every peer enforces)."""
        self.max_age = in_own_steps(self.configured[0], seconds)
        self.record_ttl = in_own_steps(self.configured[1], seconds, MAX_RECORD_TTL)
