"""SAGC: straggler-aware group control (docs/SAGC.md), a small pure controller.

It picks each step's group size G from a candidate list to maximise the long-run mean of log2(G) subject to
a straggler rate <= delta, where a group straggles when max(lengths) / median(lengths) > tau.

- Risk model: a Beta(alpha_G, beta_G) posterior over the straggler probability of every candidate size,
  with forgetting: each step, old evidence decays towards the prior by gamma (rollout lengths drift).
- Dual ascent: lambda <- clip(lambda + eta * (S_t - delta), 0, lambda_max), S_t the step's straggler rate.
- Thompson sampling: draw p~ from each posterior in the neighbourhood of the current size and pick the
  size maximising v(G) - lambda * p~, where v(G) = log2(G) (`price_time` off: the value of a step, right when
  every step costs the same, as at a fixed number of completions a step) or log2(G) * c(current) / c(G)
  (`price_time` on: the value per second of a step, in units of the current size's step; c(G) is the measured
  seconds of our own steps at size G, generation and the own groups' share of learning (policy.size_seconds;
  each new step at G weighs 1 - gamma); an
  unmeasured size is priced from the nearest measured one in proportion to G, and with nothing measured yet
  every size costs the same).
- Other peers' evidence (their groups' length summaries) is kept apart from our own and capped: for any size
  it amounts to at most `max_foreign_evidence` pseudo-observations, however many peers (or one hostile peer
  with a flood of summaries) report it, so a size we try is soon judged by our own groups.

No clock reads and no I/O: lengths come in, sizes go out; the random generator is seeded and its state is
part of `state_dict()` (plain JSON-able data) so a restored controller continues exactly.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass


@dataclass(frozen=True)
class Posterior:
    alpha: float
    beta: float

    @property
    def mean(self) -> float:
        return self.alpha / (self.alpha + self.beta)


def straggles(max_len: float, median_len: float, tau: float) -> bool:
    """The straggler rule: the longest completion exceeds tau times the median length (median floored at 1)."""
    return max_len > tau * max(median_len, 1)


def decay(post: Posterior, prior: Posterior, gamma: float) -> Posterior:
    """Old evidence shrinks towards the prior by the forgetting factor gamma."""
    return Posterior(prior.alpha + gamma * (post.alpha - prior.alpha), prior.beta + gamma * (post.beta - prior.beta))


def size_cost(costs: dict[int, float], size: int) -> float | None:
    """The seconds of a step at `size`: measured, else the nearest measured size's scaled by
    size / that size (decoding cost in proportion to the completions: the pessimistic guess for a larger size,
    corrected once it is tried); None with nothing measured."""
    if size in costs:
        return costs[size]
    if not costs:
        return None
    nearest = min(costs, key=lambda g: (abs(g - size), g))
    return costs[nearest] * size / nearest


def value(size: int, current: int, costs: dict[int, float], price_time: bool) -> float:
    """The statistical value log2(G) of a size, per second of a step in units of the current size's step when
    `price_time` (so the current size's value is log2 of it either way)."""
    if not price_time:
        return math.log2(size)
    mine, theirs = size_cost(costs, current), size_cost(costs, size)
    if not mine or not theirs:
        return math.log2(size)
    return math.log2(size) * mine / theirs


def dual_step(lam: float, rate: float, delta: float, eta: float, lam_max: float) -> float:
    """Projected dual ascent on the straggler budget."""
    return min(max(lam + eta * (rate - delta), 0.0), lam_max)


class SAGC:
    def __init__(self, cfg):
        """cfg: a node.config.SAGCConfig (validated there)."""
        self.cfg = cfg
        self.prior = Posterior(cfg.prior_alpha, cfg.prior_beta)
        self.posteriors = {g: self.prior for g in cfg.candidates}  # prior + our own evidence
        self.foreign = {g: (0.0, 0.0) for g in cfg.candidates}  # other peers' (stragglers, others), capped
        self.lam = 0.0
        self.current = cfg.initial if cfg.initial else cfg.candidates[-1]
        self.costs: dict[int, float] = {}  # size -> seconds of our own steps at it (a new step weighs 1 - gamma)
        self.rng = random.Random(cfg.seed)

    def neighbourhood(self) -> list[int]:
        sizes = list(self.cfg.candidates)
        i = sizes.index(self.current)
        return sizes[max(0, i - self.cfg.neighbourhood): i + self.cfg.neighbourhood + 1]

    def choose(self) -> int:
        """Thompson sampling of v(G) - lambda * p~_G over the neighbourhood of the current size."""
        best, best_score = self.current, -math.inf
        for g in self.neighbourhood():
            post = self.belief(g)
            worth = value(g, self.current, self.costs, self.cfg.price_time)
            score = worth - self.lam * self.rng.betavariate(post.alpha, post.beta)
            if score > best_score:
                best, best_score = g, score
        self.current = best
        return best

    def belief(self, size: int) -> Posterior:
        """The posterior of a size's straggler probability: own evidence plus the (capped) foreign one."""
        post, (a, b) = self.posteriors[size], self.foreign[size]
        return Posterior(post.alpha + a, post.beta + b)

    def observe(self, size: int, straggled: bool, weight: float = 1.0, foreign: bool = False) -> None:
        """Adds one group's outcome to the evidence of its size: our own, or (foreign, weight < 1) another
        peer's, whose total per size is scaled down to at most max_foreign_evidence."""
        if size not in self.posteriors or weight <= 0:
            return
        if foreign:
            a, b = self.foreign[size]
            a, b = a + weight * straggled, b + weight * (not straggled)
            scale = min(1.0, self.cfg.max_foreign_evidence / (a + b))
            self.foreign[size] = (a * scale, b * scale)
            return
        post = self.posteriors[size]
        self.posteriors[size] = Posterior(post.alpha + weight * straggled, post.beta + weight * (not straggled))

    def observe_cost(self, size: int, seconds: float) -> None:
        """One of our own steps at `size` took `seconds` (kept only with `price_time`, and when positive and
        finite: without it the state reads no clock, so a resumed run repeats the uninterrupted one exactly)."""
        if not self.cfg.price_time or size not in self.posteriors or not math.isfinite(seconds) or seconds <= 0:
            return
        old = self.costs.get(size)
        self.costs[size] = seconds if old is None else self.cfg.gamma * old + (1 - self.cfg.gamma) * seconds

    def end_step(self, own_straggler_rate: float) -> None:
        """After a training step: dual update from this peer's own rate, then forgetting."""
        c = self.cfg
        self.lam = dual_step(self.lam, own_straggler_rate, c.delta, c.eta, c.lambda_max)
        self.posteriors = {g: decay(p, self.prior, c.gamma) for g, p in self.posteriors.items()}
        self.foreign = {g: (c.gamma * a, c.gamma * b) for g, (a, b) in self.foreign.items()}

    def belief_means(self) -> dict[str, float]:
        """Each size's believed straggler probability (for metrics)."""
        return {str(g): round(self.belief(g).mean, 4) for g in self.posteriors}

    def state_dict(self) -> dict:
        version, internal, gauss = self.rng.getstate()
        return {"lambda": self.lam, "current": self.current,
                "posteriors": {str(g): [p.alpha, p.beta] for g, p in self.posteriors.items()},
                "foreign": {str(g): list(ab) for g, ab in self.foreign.items()},
                "costs": {str(g): c for g, c in self.costs.items()},
                "rng": [version, list(internal), gauss]}

    def load_state_dict(self, state: dict) -> None:
        self.lam = float(state["lambda"])
        self.current = int(state["current"])
        self.posteriors = {int(g): Posterior(a, b) for g, (a, b) in state["posteriors"].items()}
        self.foreign = {int(g): (a, b) for g, (a, b) in state["foreign"].items()}
        self.costs = {int(g): float(c) for g, c in state.get("costs", {}).items()}  # (absent before 2026-12-06)
        version, internal, gauss = state["rng"]
        self.rng.setstate((version, tuple(internal), gauss))
