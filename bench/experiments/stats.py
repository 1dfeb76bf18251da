"""The statistics of the results page: finals, areas under the held-out curve, values at equal time, paired 95%
intervals and the power to see an effect."""
from __future__ import annotations

import math
import statistics

from bench.experiments.grid import FINAL_POINTS

EFFECT = 0.05  # the effect the verdict must be able to see (issue 22): power is printed for it


T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}  # t(0.975, df)


def swarm_curve(curves: dict) -> list[tuple[float, float]]:
    """The peers' mean accuracy at each evaluation, at the mean of their cumulative own step seconds."""
    n = min(len(c) for c in curves.values())
    return [(statistics.mean(c[i][0] for c in curves.values()), statistics.mean(c[i][1] for c in curves.values()))
            for i in range(n)]


def time_to_reach(curve: list[tuple[float, float]], target: float) -> float:
    """The own step seconds at which a curve first reaches `target` (linear between evaluations; inf never)."""
    if curve and curve[0][1] >= target:
        return curve[0][0]
    for (t0, a0), (t1, a1) in zip(curve, curve[1:], strict=False):
        if a1 >= target:  # a0 < target <= a1: the crossing lies between them
            return t0 + (t1 - t0) * (target - a0) / (a1 - a0)
    return math.inf


def mean_std(values: list[float]) -> tuple[float, float]:
    if not values:
        return math.nan, math.nan
    return statistics.mean(values), statistics.stdev(values) if len(values) > 1 else math.nan  # one seed: no spread


def paired_interval(diffs: list[float]) -> tuple[float, float]:
    """Mean of paired differences and the half-width of its 95% t interval (nan with one pair)."""
    mean = statistics.mean(diffs)
    if len(diffs) < 2:
        return mean, math.nan
    return mean, T95.get(len(diffs) - 1, 1.96) * statistics.stdev(diffs) / math.sqrt(len(diffs))


def final(evals: list[dict], key: str) -> float:
    """Accuracy at the end of a run: the mean of its last FINAL_POINTS evaluations (less noise than one)."""
    tail = evals[-FINAL_POINTS:] if len(evals) > FINAL_POINTS else evals[-1:]
    return statistics.mean(e[key] for e in tail)


def equal_time(evals: list[dict], alone: list[dict], key: str) -> float:
    """The swarm peer's accuracy at the own-step time Alone had spent at each of its last evaluations, averaged
    like `final`: the comparison at equal wall clock."""
    tail = alone[-FINAL_POINTS:] if len(alone) > FINAL_POINTS else alone[-1:]
    return statistics.mean(at_seconds(evals, key, e["seconds"]) for e in tail)


def at_seconds(evals: list[dict], key: str, seconds: float) -> float:
    """Accuracy reached by `seconds` of own step time: linear between evaluation points, the last one beyond."""
    for a, b in zip(evals, evals[1:], strict=False):
        if b["seconds"] >= seconds:
            span = b["seconds"] - a["seconds"]
            frac = (seconds - a["seconds"]) / span if span > 0 else 1.0
            return a[key] + frac * (b[key] - a[key])
    return evals[-1][key]


def auc(evals: list[dict], key: str) -> float:
    """The primary endpoint: the area under the held-out accuracy curve, as the mean of the evaluations after
    step 0 (evaluations are evenly spaced in steps; node/observability/report.py held_out_auc, as `swarm local`
    reports it)."""
    from node.observability.report import held_out_auc

    after = [e[key] for e in evals if e["step"] > 0]
    return held_out_auc(after) if after else evals[-1][key]


def auc_at_equal_time(evals: list[dict], other: list[dict], key: str) -> tuple[float, float]:
    """Both runs' accuracy areas over the same own-compute span: the shorter run's total step seconds, cut into
    as many points as `other` has evaluations after step 0 (linear between evaluations)."""
    horizon = min(evals[-1]["seconds"], other[-1]["seconds"])
    points = max(sum(e["step"] > 0 for e in other), 1)
    grid = [horizon * k / points for k in range(1, points + 1)]
    return tuple(statistics.mean(at_seconds(run, key, t) for t in grid) for run in (evals, other))


def power(diffs: list[float], effect: float = EFFECT) -> tuple[float, float, int]:
    """For paired differences: their sd, the power of a two-sided 5% test at this many seeds to see `effect`,
    and the seeds that give 80% power (normal approximation with t's critical value; nan with one seed)."""
    if len(diffs) < 2:
        return math.nan, math.nan, 0
    sd = max(statistics.stdev(diffs), 1e-9)
    z = statistics.NormalDist()
    crit = T95.get(len(diffs) - 1, 1.96)
    achieved = z.cdf(effect * math.sqrt(len(diffs)) / sd - crit)
    needed = 2
    while needed < 1000 and z.cdf(effect * math.sqrt(needed) / sd - T95.get(needed - 1, 1.96)) < 0.8:
        needed += 1
    return sd, achieved, needed


def drawdown(values: list[float]) -> float:
    """The largest fall from a best-so-far value to a later one (0 for a curve that never falls)."""
    best, worst = -math.inf, 0.0
    for value in values:
        best = max(best, value)
        worst = max(worst, best - value)
    return worst
