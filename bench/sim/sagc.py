"""Trace-driven simulator of SAGC vs fixed group sizes (the real controller, simulated rollout lengths).

Length families (token counts per completion):
- heavy: each prompt has a difficulty scale (lognormal); completions are lognormal around it with a spread
  that grows over training (sigma 0.30 -> 0.55) while the mean length doubles: the tail grows as models
  learn to reason longer (the straggler paper's observation that max/mean rises).
- runaway: steady lengths (sigma 0.25) but each completion has a 2.5% chance of running away to the
  length cap (a repetition loop), whatever the training progress: another family, different variability.

Cost model: a group is decoded as one padded batch, so it costs G x (its longest completion) token-steps,
and a step costs the sum of its groups; the variant `step batch` decodes the whole step as one batch
(all completions x the step's longest). Useful work is the sum of lengths; utilisation = useful / padded.

For fixed G in {4, 8, 12, 16} and SAGC, over several seeds in one run, for both batch modes, prints: wall
clock (token-steps, and as a ratio to fixed G=16), straggler rate (overall and second half), mean log2 G and
padding utilisation; checks the frontier claim; writes a plot.

    python -m bench.sim.sagc [--steps 300] [--seeds 5] [--plot bench/out/sagc_sim.png]
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import statistics
from pathlib import Path

import numpy as np

from node.config import SAGCConfig
from node.sagc.policy import FixedGroups, SAGCGroups, prompts_for, straggled
from protocol.codec import LengthSummary

FIXED = (4, 8, 12, 16)
PROMPTS, COMPLETIONS = 16, 192  # fixed_prompts: prompts per step; fixed_completions: completions per step


def sample_group(family: str, progress: float, group_size: int, rng: np.random.Generator) -> np.ndarray:
    """Completion lengths of one group; progress in [0, 1] is the share of training done."""
    if family == "heavy":
        scale = 300 * (1 + progress) * math.exp(rng.normal(0, 0.5))
        sigma = 0.30 + 0.25 * progress
        lengths = scale * np.exp(rng.normal(0, sigma, group_size))
        return np.clip(lengths, 1, 8192).astype(int)
    scale = 250 * math.exp(rng.normal(0, 0.3))
    lengths = scale * np.exp(rng.normal(0, 0.25, group_size))
    runaway = rng.random(group_size) < 0.025
    return np.where(runaway, 2048, np.clip(lengths, 1, 2048)).astype(int)


@dataclasses.dataclass
class RunStats:
    cost_groups: float  # token-steps, each group its own padded batch
    cost_step: float  # token-steps, the whole step one padded batch
    useful: float  # tokens actually generated
    straggle: list  # per group, over the run: 1 if it straggled
    straggle_second: list  # the same, second half of the run only
    log2g: list  # per step
    sizes: list  # per step


def simulate(policy_name: str, family: str, mode: str, seed: int, steps: int, cfg: SAGCConfig) -> RunStats:
    rng = np.random.default_rng(seed)
    if policy_name == "sagc":
        policy = SAGCGroups(dataclasses.replace(cfg, seed=seed))
    else:
        policy = FixedGroups(int(policy_name), cfg.tau)
    stats = RunStats(0.0, 0.0, 0.0, [], [], [], [])
    for step in range(steps):
        g = policy.choose()
        n_prompts = prompts_for(mode, g, PROMPTS, COMPLETIONS)
        groups = [sample_group(family, step / steps, g, rng) for _ in range(n_prompts)]
        summaries = [LengthSummary(g, int(x.max()), float(np.median(x)), float(x.mean()), int(x.sum()), 0.0,
                                   family) for x in groups]
        policy.after_step(summaries, {}, family)
        flags = [int(straggled(s, cfg.tau)) for s in summaries]
        stats.straggle += flags
        if step >= steps // 2:
            stats.straggle_second += flags
        stats.cost_groups += sum(g * int(x.max()) for x in groups)
        stats.cost_step += g * n_prompts * max(int(x.max()) for x in groups)
        stats.useful += sum(int(x.sum()) for x in groups)
        stats.log2g.append(math.log2(g))
        stats.sizes.append(g)
    return stats


def summarise(runs: list[RunStats]) -> dict:
    med = statistics.median
    return {
        "wall": med(r.cost_groups for r in runs),
        "wall_step": med(r.cost_step for r in runs),
        "rate": med(statistics.mean(r.straggle) for r in runs),
        "rate2": med(statistics.mean(r.straggle_second) for r in runs),
        "log2g": med(statistics.mean(r.log2g) for r in runs),
        "util": med(r.useful / r.cost_groups for r in runs),
        "util_step": med(r.useful / r.cost_step for r in runs),
        "sizes": runs[0].sizes,
    }


def frontier_check(rows: dict, delta: float, slack: float = 0.05) -> tuple[bool, str]:
    """SAGC must meet the budget wherever a fixed size does, with a higher mean log2 G than all that do."""
    budget = delta + slack
    meeting = [name for name in map(str, FIXED) if rows[name]["rate"] <= budget and rows[name]["rate2"] <= budget]
    sagc = rows["sagc"]
    if not meeting:
        return True, "no fixed size meets the budget (nothing to beat)"
    ok = sagc["rate"] <= budget and sagc["rate2"] <= budget
    best = max(rows[name]["log2g"] for name in meeting)
    ok = ok and sagc["log2g"] > best
    text = (f"fixed sizes within budget: {', '.join(meeting)} (best mean log2 G {best:.2f}); "
            f"SAGC {sagc['log2g']:.2f} at rates {sagc['rate']:.3f} / {sagc['rate2']:.3f}")
    return ok, text


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = list(results)
    fig, axes = plt.subplots(2, len(keys), figsize=(4.2 * len(keys), 6), squeeze=False)
    for col, key in enumerate(keys):
        rows = results[key]
        ax = axes[0][col]
        ax.plot(rows["sagc"]["sizes"], lw=1, color="tab:red", label="SAGC G (seed 0)")
        ax.set(title=f"{key[0]}, {key[1]}", ylabel="group size", ylim=(0, 17))
        ax.legend(loc="lower left", fontsize=8)
        ax = axes[1][col]
        names = list(rows)
        x = np.arange(len(names))
        ax.bar(x - 0.2, [rows[n]["rate"] for n in names], 0.4, label="straggler rate")
        ax.bar(x + 0.2, [rows[n]["wall"] / rows["16"]["wall"] for n in names], 0.4, label="wall / G=16")
        ax.axhline(0.3, color="k", ls=":", lw=1)
        ax.set_xticks(x, [f"G={n}" if n != "sagc" else "SAGC" for n in names], fontsize=8)
        ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--plot", default="bench/out/sagc_sim.png")
    parser.add_argument("--eta", type=float, help="override the dual step (calibration)")
    parser.add_argument("--gamma", type=float, help="override the forgetting factor (calibration)")
    parser.add_argument("--lambda-max", type=float, help="override the dual bound (calibration)")
    args = parser.parse_args(argv)
    cfg = SAGCConfig()
    if args.eta is not None:
        cfg = dataclasses.replace(cfg, eta=args.eta)
    if args.gamma is not None:
        cfg = dataclasses.replace(cfg, gamma=args.gamma)
    if args.lambda_max is not None:
        cfg = dataclasses.replace(cfg, lambda_max=args.lambda_max)
    results, all_ok = {}, True
    for family in ("heavy", "runaway"):
        for mode in ("fixed_prompts", "fixed_completions"):
            rows = {}
            for name in [*map(str, FIXED), "sagc"]:
                rows[name] = summarise([simulate(name, family, mode, s, args.steps, cfg) for s in range(args.seeds)])
            results[(family, mode)] = rows
            print(f"\n{family} lengths, {mode}, {args.steps} steps, median of {args.seeds} seeds "
                  f"(tau {cfg.tau}, delta {cfg.delta}, eta {cfg.eta}, gamma {cfg.gamma})")
            print(f"{'policy':<7} {'wall Mtok':>9} {'/G=16':>6} {'step-batch /G=16':>16} {'strag':>6} "
                  f"{'strag 2nd':>9} {'log2 G':>7} {'util':>5} {'util step':>9}")
            for name, r in rows.items():
                print(f"{'SAGC' if name == 'sagc' else 'G=' + name:<7} {r['wall'] / 1e6:>9.1f} "
                      f"{r['wall'] / rows['16']['wall']:>6.2f} {r['wall_step'] / rows['16']['wall_step']:>16.2f} "
                      f"{r['rate']:>6.3f} {r['rate2']:>9.3f} {r['log2g']:>7.2f} {r['util']:>5.2f} "
                      f"{r['util_step']:>9.2f}")
            ok, text = frontier_check(rows, cfg.delta)
            all_ok &= ok
            print(f"frontier: {'PASS' if ok else 'FAIL'}: {text}")
    print("\npaper (Llama-3.2-3B, DAPO): wall 29.5 h -> 16.0 h (0.54x of G=16); straggler rate 99.6% -> 43.4%")
    if args.plot:
        plot(results, Path(args.plot))
        print(f"plot: {args.plot}")
    return 0 if all_ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
