"""How long records stay fresh at one peer: a single object read by everything that judges an age or sets one.

A received group or announcement is stale once older than `max_age`, and the peer's own announcement lives
`record_ttl`; they start at swarm.max_age and swarm.record_ttl. A peer whose steps are long (a CPU, a large model,
long answers) lengthens both to FRESH_STEPS of its own steps (`own_step_took`; while a step is under way, of a
step at least as long as it has run: `step_under_way`): staleness bounds off-policy drift, which is counted in
the receiver's updates, not in seconds. Judged in seconds alone, such a peer would refuse
every partner's groups (all older than swarm.max_age when pulled) and lose sight of partners whose announcements
expire between its steps. Fast peers keep the configured values.

A received group is judged by our updates, not by the seconds between them (`group_window`): one created after
the end of our FRESH_STEPS-th latest update is fresh however long we paused since (a held-out evaluation, a
checkpoint), since a pause moves no weight. Found running SmolLM2 and Gemma on worked answers: SmolLM2's
evaluation after its step 3 took 300 s, longer than its 3 steps of 81 s, and it refused as stale all 8 groups
Gemma sent it, which had seen 1 or 2 of its updates.
"""
from __future__ import annotations

import collections
import math

from protocol import MAX_RECORD_TTL

FRESH_STEPS = 3  # records stay fresh for this many of our own steps when those outlast the configured seconds


def in_own_steps(configured: float, step_seconds: float, ceiling: float = math.inf) -> float:
    """The longer of `configured` seconds and FRESH_STEPS steps of `step_seconds` each, at most `ceiling`."""
    return min(ceiling, max(configured, FRESH_STEPS * step_seconds))


def since_updates(max_age: float, update_ends, now: float) -> float:
    """How old a received group may be at `now`: `max_age`, or longer, back to the FRESH_STEPS-th latest of
    `update_ends` (when our updates ended, oldest first) once there are FRESH_STEPS of them."""
    if len(update_ends) < FRESH_STEPS:
        return max_age
    return max(max_age, now - update_ends[-FRESH_STEPS])


class Freshness:
    def __init__(self, max_age: float, record_ttl: float):
        """max_age, record_ttl: the configured seconds (swarm.max_age, swarm.record_ttl), never shortened."""
        self.configured = (max_age, record_ttl)
        self.max_age, self.record_ttl = max_age, record_ttl
        self.update_ends: collections.deque[float] = collections.deque(maxlen=FRESH_STEPS)

    @classmethod
    def of(cls, cfg) -> Freshness:
        """From a SwarmConfig."""
        return cls(cfg.max_age, cfg.record_ttl)

    def own_step_took(self, seconds: float, now: float) -> None:
        """Our latest step took `seconds` and its update ended at `now` (the transport's clock): the windows
        of such steps (`windows`)."""
        self.max_age, self.record_ttl = self.windows(seconds)
        self.update_ends.append(now)

    def step_under_way(self, seconds: float) -> None:
        """Our current step has run `seconds` so far (its generation): it will last at least that, so the
        windows cover FRESH_STEPS such steps already (never shortened here: own_step_took sets them when the step
        ends). Before it, a peer's first step on a CPU (minutes) outlived the configured 120 s: its first
        announcement expired before partners read it, and it judged theirs stale by its own first gather."""
        max_age, record_ttl = self.windows(seconds)
        self.max_age, self.record_ttl = max(self.max_age, max_age), max(self.record_ttl, record_ttl)

    def windows(self, step_seconds: float) -> tuple[float, float]:
        """(max_age, record_ttl) for steps of `step_seconds`: FRESH_STEPS of them where longer than configured,
        our records at most MAX_RECORD_TTL (which every peer enforces)."""
        return (in_own_steps(self.configured[0], step_seconds),
                in_own_steps(self.configured[1], step_seconds, MAX_RECORD_TTL))

    def group_window(self, now: float) -> float:
        """How old a received group may be at `now`: max_age, or back to the end of our FRESH_STEPS-th latest
        update where that is longer (a pause between our steps does not age a group)."""
        return since_updates(self.max_age, self.update_ends, now)
