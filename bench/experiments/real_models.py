"""The real-model comparison of docs/results/real-models (issue 24): each real model in a swarm against the same model
alone, with the same seed and settings, per seed and paired over seeds, at equal steps and at equal wall clock.

Each RUN folder holds one seed's metrics, as docs/results/real-models/run-seed.sh writes them: swarm-<model>.jsonl
and alone-<model>.jsonl for every model. Prints a table per seed, the paired differences (swarm - alone) with
their 95% interval where there are two seeds or more, what the swarm's trust mechanism did, what each run's group
control did (sizes, straggler rate, generation and step seconds) and how long each took to reach the second arm's
final held-out accuracy, and draws every held-out accuracy curve to --plot. `--arms A,B` compares two other arms
the same way (A - B), e.g. `sagc,g16`: a folder's sagc-<model>.jsonl against its g16-<model>.jsonl.

    python -m bench.experiments.real_models docs/results/real-models docs/results/real-models/seed1 --plot out.png
    python -m bench.experiments.real_models docs/results/real-models/work-compare/sagc-seed1 --arms sagc,g16
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

from bench.experiments.stats import paired_interval, power
from node.observability.report import held_out_auc


def load(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def curve(rows: list[dict], split: str, most: int | None = None) -> list[tuple[int, float, float]]:
    """(steps done, greedy pass@1 on `split`, seconds since the run's first step began) of every held-out
    evaluation, the one before training included, up to `most` steps done."""
    start = rows[0]["time"] - rows[0]["step_seconds"]
    points = []
    for r in rows:
        for done, scores, at in ((r["step"], r["eval_before"], start), (r["step"] + 1, r["eval"], r["time"])):
            key = f"{split}/greedy"
            if key in scores and (most is None or done <= most):
                points.append((done, scores[key], at - start))
    return points


def summary(rows: list[dict], most: int) -> dict:
    """One run's figures over its first `most` steps."""
    rows = [r for r in rows if r["step"] < most]
    ident, ood = curve(rows, "train", most), curve(rows, "test", most)
    swarm = [r["swarm"] for r in rows]
    return {
        "steps": len(rows),
        "id_auc": held_out_auc([acc for done, acc, _ in ident if done > 0]),
        "id_final": ident[-1][1], "ood_auc": held_out_auc([acc for done, acc, _ in ood if done > 0]),
        "ood_final": ood[-1][1], "step_s": statistics.median(r["step_seconds"] for r in rows),
        "received": sum(s.get("groups_received", 0) for s in swarm),
        "used": sum(s.get("groups_used", 0) for s in swarm),
        "uninformative": sum(s.get("uninformative", 0) for s in swarm),
        "refused": sum(sum(s.get("rejected", {}).values()) for s in swarm),
        "harm_max": max((s.get("harm", 0.0) for s in swarm), default=0.0),
        "demoted": sum(s.get("demoted", 0) for s in swarm), "distrusted": sum(s.get("distrusted", 0) for s in swarm),
        "curve": ident,
    }


def at_time(points: list[tuple[int, float, float]], seconds: float) -> float:
    """The accuracy of the last evaluation made within `seconds` of the run's start."""
    return [acc for _, acc, at in points if at <= seconds + 1e-6][-1]


def own_seconds_curve(rows: list[dict], split: str = "train") -> list[tuple[int, float, float]]:
    """curve's points timed by the run's own step seconds (generation and learning, summed to each evaluation;
    the evaluations' own time left out, so an arm that evaluates more often is not charged for it)."""
    done_at, total = {0: 0.0}, 0.0
    for r in rows:
        total += r["step_seconds"]
        done_at[r["step"] + 1] = total
    return [(done, acc, done_at[done]) for done, acc, _ in curve(rows, split)]


def time_to(points: list[tuple[int, float, float]], target: float) -> float | None:
    """The seconds of the first evaluation after training began whose accuracy reaches `target` (None: never)."""
    return next((at for done, acc, at in points if done > 0 and acc >= target - 1e-9), None)


def arm_figures(rows: list[dict]) -> dict:
    """What a whole run's group control did: the sizes chosen, the mean of its steps' straggler rates, median
    generation and step seconds."""
    rates = [r["group"]["straggler_rate"] for r in rows if "straggler_rate" in r.get("group", {})]
    generation = [r["gen_seconds"] for r in rows if "gen_seconds" in r]
    return {"sizes": [r.get("group_size", "?") for r in rows],  # (a metrics file from before these were kept)
            "straggler": statistics.mean(rates) if rates else float("nan"),
            "gen_s": statistics.median(generation) if generation else float("nan"),
            "step_s": statistics.median(r["step_seconds"] for r in rows)}


def evaluation_sd(p_swarm: float, p_alone: float, prompts: int) -> float:
    """The sampling sd of the difference of two independent greedy pass@1 evaluations on `prompts` prompts each
    (binomial): the noise within one seed, before any seed-to-seed spread."""
    return math.sqrt((p_swarm * (1 - p_swarm) + p_alone * (1 - p_alone)) / prompts)


def paired(diffs: list[float]) -> str:
    """Mean +- the 95% half-width, and the power to see +0.05 at this many seeds (and the seeds for 80%)."""
    mean, half = paired_interval(diffs)
    if math.isnan(half):
        return f"{mean:+.3f} (one seed)"
    _, achieved, needed = power(diffs, 0.05)
    return f"{mean:+.3f} +- {half:.3f} (power {achieved:.2f}; {needed} seeds for 0.8)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="one folder per seed")
    parser.add_argument("--models", default="smollm2,gemma3")
    parser.add_argument("--plot", type=Path, default=None)
    parser.add_argument("--eval-prompts", type=int, default=64, help="prompts per held-out evaluation (eval.prompts)")
    parser.add_argument("--arms", default="swarm,alone", help="the two arms compared (first - second): each folder's "
                        "<arm>-<model>.jsonl")
    args = parser.parse_args(argv)
    models = args.models.split(",")
    first, second = args.arms.split(",")
    diffs: dict[tuple[str, str], list[float]] = {}
    curves, within, controls = [], [], []
    print("| seed folder | model | run | steps | ID AUC | final ID | OOD AUC | final OOD | step s | received "
          "(trained on, uninformative) | refused | harm max | demoted / distrusted |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for folder in args.runs:
        for model in models:
            swarm_rows, alone_rows = load(folder / f"{first}-{model}.jsonl"), load(folder / f"{second}-{model}.jsonl")
            most = min(len(swarm_rows), len(alone_rows))  # equal steps
            runs = {first: summary(swarm_rows, most), second: summary(alone_rows, most)}
            for name, s in runs.items():
                print(f"| {folder} | {model} | {name} | {s['steps']} | {s['id_auc']:.3f} | {s['id_final']:.3f} | "
                      f"{s['ood_auc']:.3f} | {s['ood_final']:.3f} | {s['step_s']:.1f} | {s['received']} "
                      f"({s['used']}, {s['uninformative']}) | {s['refused']} | {s['harm_max']:.2f} | "
                      f"{s['demoted']} / {s['distrusted']} |")
                curves.append((folder.name, model, name, s["curve"]))
            sw, al = runs[first], runs[second]
            for split in ("id", "ood"):
                d, sd = sw[f"{split}_final"] - al[f"{split}_final"], evaluation_sd(sw[f"{split}_final"],
                                                                                     al[f"{split}_final"],
                                                                                     args.eval_prompts)
                within.append(f"| {folder} | {model} | {split.upper()} | {d:+.3f} | {sd:.3f} | {d / sd:+.2f} |")
            for key in ("id_auc", "id_final", "ood_auc", "ood_final"):
                diffs.setdefault((model, key), []).append(sw[key] - al[key])
            _, target, target_at = own_seconds_curve(alone_rows[:most])[-1]  # the second arm's final ID, equal steps
            for name, arm_rows in ((first, swarm_rows), (second, alone_rows)):
                f, reached = arm_figures(arm_rows), time_to(own_seconds_curve(arm_rows), target)
                ratio = f"{reached / target_at:.2f}x" if reached is not None else "not reached"
                controls.append(f"| {folder} | {model} | {name} | {len(arm_rows)} | {' '.join(map(str, f['sizes']))} | "
                                f"{f['straggler']:.2f} | {f['gen_s']:.0f} | {f['step_s']:.0f} | "
                                f"{reached if reached is None else round(reached)} | {ratio} |")
            whole = curve(swarm_rows, "train"), curve(alone_rows, "train")  # equal wall clock: whole runs, up to
            wall = min(points[-1][2] for points in whole)                    # the shorter one's last evaluation
            diffs.setdefault((model, "id_at_wall"), []).append(at_time(whole[0], wall) - at_time(whole[1], wall))
    print(f"\nwithin a seed: final {first} - {second} and the sampling sd of that difference ({args.eval_prompts} "
          "prompts a split, binomial)\n| seed folder | model | split | final difference | sd | in sds |\n"
          "|---|---|---|---|---|---|\n" + "\n".join(within))
    print(f"\nwhole runs: the group sizes chosen, the mean straggler rate of their steps, median generation and step "
          f"seconds, and the own step seconds to the first evaluation at or above {second}'s final ID at equal "
          f"steps (the ratio: to the own seconds of {second}'s final evaluation at equal steps)\n"
          "| seed folder | model | run | steps | G chosen | straggler rate | generation s | step s | "
          "seconds to the target | ratio |\n"
          "|---|---|---|---|---|---|---|---|---|---|\n" + "\n".join(controls))
    print(f"\n{first} - {second}, paired over seeds (95% t interval), equal steps; 'ID at equal wall clock': the last "
          "evaluation each whole run made within the time of the one that ended first")
    print("| model | ID AUC | final ID | OOD AUC | final OOD | ID at equal wall clock |")
    print("|---|---|---|---|---|---|")
    for model in models:
        print(f"| {model} | " + " | ".join(paired(diffs[model, key]) for key in
                                         ("id_auc", "id_final", "ood_auc", "ood_final", "id_at_wall")) + " |")
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, len(models), figsize=(5 * len(models), 3.6), squeeze=False)
        for ax, model in zip(axes[0], models, strict=True):
            for seed, m, run, points in curves:
                if m == model:
                    ax.plot([p[0] for p in points], [p[1] for p in points], "-o" if run == first else "--x",
                            label=f"{run} ({seed})", markersize=4)
            ax.set(title=model, xlabel="steps", ylabel="held-out ID greedy pass@1")
            ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(args.plot, dpi=110)
        print(f"plot: {args.plot}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
