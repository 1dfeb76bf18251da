"""SAGC against fixed group sizes where completions straggle: the checked-digits pair (check-sub + check-add, the
zoo's long-tail models: node/tasks/checked.py) as real processes, one `swarm local` per (policy, seed).

Each run: a bootstrap and the two peers, each its own process and DHT node, sharing under the node's default
transfer policy, the task's own cap (224 tokens: nothing of the tail is cut), 8 prompts a step (fixed prompts: G
scales the completions), held-out in-distribution greedy accuracy every `--eval-every` steps. Every policy of
one seed starts from the same weights with the same training seed. Fixed G = 16 runs `--steps` steps; the other
policies of its seed run on a time budget instead, until each peer has spent 1.25x G = 16's own step seconds
(cheaper steps, more of them: an equal step count would cut them off before they could reach G = 16's accuracy).

Reported per policy, over seeds: time to fixed G = 16's held-out accuracy (the mean of its last evaluations, per
seed; the peers' mean curve over their cumulative own step seconds, evaluation excluded), its ratio to G = 16's
time (median over seeds, and the paired 95% interval of the log ratio), the straggler rate (tau of the run),
generation seconds a step, decode slots a step, mean group size and the final accuracy; the power the seeds give.

    python -m bench.experiments.straggler [--seeds 6] [--steps 60] [--policies sagc,4,8,16]
           [--tau 2] [--delta 0.3] [--out docs/results/straggler]
    python -m bench.experiments.straggler --report-only   # the table from the runs already there
    python -m bench.experiments.straggler --models smollm2-135m --task arith-work-add --prompts 4 \
           --set model.lora=true --out runs/straggler-real   # a real model's long working (one peer here)
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

from bench.experiments.grid import FINAL_POINTS, ROOT
from bench.experiments.runs import source_commit
from bench.experiments.stats import T95, at_seconds, paired_interval, swarm_curve, time_to_reach
from bench.swarms import run_until

MODELS = ("check-sub", "check-add")  # borrows expert + carries expert, both with the long tail of checks
TASK = "digits-check"
OUT = ROOT / "docs" / "results" / "straggler"
BUDGET = 1.25  # the other policies of a seed run until their own step seconds are this many times fixed G = 16's
SAGC_POLICIES = {  # the controller's two objectives: policy name -> (label, settings)
    "sagc": ("SAGC", ()),  # the node's default: log2(G) per second of generation (sagc.price_time)
    "sagc-per-step": ("SAGC, log2 G a step", ("sagc.price_time=false",)),  # the straggler paper's objective
}
ORDER = ("sagc", "sagc-per-step", "4", "8", "12", "16")  # the report's rows


def label_of(policy: str) -> str:
    return SAGC_POLICIES[policy][0] if policy in SAGC_POLICIES else f"G={policy}"


def run_key(policy: str, seed: int, steps: int) -> str:
    return f"{policy}_s{seed}_n{steps}"


def command(policy: str, seed: int, steps: int, every: int, tau: float, delta: float, prompts: int,
            eval_prompts: int, folder: Path, models=MODELS, task: str = TASK, settings=()) -> list[str]:
    """The `swarm local` command of one run (`settings`: further SECTION.FIELD=VALUE, e.g. a real model's LoRA)."""
    if policy in SAGC_POLICIES:
        group = ["--group-policy", "sagc", *(x for v in SAGC_POLICIES[policy][1] for x in ("--set", v))]
    else:
        group = ["--group-policy", "fixed", "--group-size", policy]
    return [sys.executable, str(ROOT / "swarm_cli.py"), "local", "--models", ",".join(models),
            "--peers", str(len(models)), "--task", task, "--steps", str(steps), "--prompts", str(prompts),
            *group, "--eval-every", str(every), "--out", str(folder),
            "--set", f"train.seed={1000 * seed}", "--set", f"sagc.seed={seed}", "--set", f"sagc.tau={tau}",
            "--set", f"sagc.delta={delta}", "--set", "eval.splits=train", "--set", "eval.samples=0",
            "--set", f"eval.prompts={eval_prompts}", *(x for v in settings for x in ("--set", v))]


def summarise_peer(rows) -> dict:
    """What the report needs of one peer's metrics: per step its G, straggler rate, generation and step
    seconds, decode slots and tokens; its evaluations over cumulative own step seconds."""
    spent, evals = 0.0, []
    if rows and rows[0].eval_before:
        evals.append({"step": 0, "seconds": 0.0, "acc": rows[0].eval_before["train/greedy"]})
    for r in rows:
        spent += r.step_seconds
        if r.eval:
            evals.append({"step": r.step + 1, "seconds": spent, "acc": r.eval["train/greedy"]})
    return {"group_size": [r.group_size for r in rows], "straggler": [r.group.straggler_rate for r in rows],
            "gen_seconds": [r.gen_seconds for r in rows], "step_seconds": [r.step_seconds for r in rows],
            "slots": [r.padded_tokens for r in rows], "tokens": [r.tokens for r in rows],
            "reward": [r.reward for r in rows], "received": [r.swarm.groups_used for r in rows], "evals": evals}


def run_one(policy: str, seed: int, args, out: Path, budget: float = 0.0) -> dict:
    """Runs (or reads) one experiment; its result one JSON file beside its `swarm local` folder. budget > 0:
    the run stops (SIGTERM to the `swarm local` we started) once every peer has spent that many own step
    seconds, else after `--steps` steps (fixed G = 16: the budget of the other policies of its seed)."""
    from node.app.local_swarm import read_metrics

    path = out / f"{run_key(policy, seed, args.steps)}.json"
    if path.exists():
        return json.loads(path.read_text())
    folder = out / "runs" / run_key(policy, seed, args.steps)
    folder.mkdir(parents=True, exist_ok=True)
    steps = args.steps * (16 // 4 if budget else 1)  # (a run on a budget: as many steps as G = 4 could use)
    models = args.models.split(",")
    cmd = command(policy, seed, steps, args.eval_every, args.tau, args.delta, args.prompts, args.eval_prompts,
                  folder, models, args.task, args.settings)
    start = time.perf_counter()

    def spent_budget() -> bool:
        spent = [sum(r.step_seconds for r in read_metrics(p)) for p in folder.glob("peer*.jsonl")]
        return bool(budget) and len(spent) == len(models) and min(spent) >= budget

    code, stopped = run_until(cmd, ROOT, folder / "local.log", spent_budget, LONGEST_RUN)
    wall = time.perf_counter() - start
    peers = {p.stem: summarise_peer(read_metrics(p)) for p in sorted(folder.glob("peer*.jsonl"))}
    short = [name for name, p in peers.items() if len(p["step_seconds"]) < steps and sum(p["step_seconds"]) < budget]
    if (code != 0 and not stopped) or short or len(peers) != len(models):
        raise RuntimeError(f"swarm local ({policy}, seed {seed}) failed (exit {code}; short: {short}): "
                           f"see {folder / 'local.log'}")
    result = {"policy": policy, "seed": seed, "steps": args.steps, "tau": args.tau, "delta": args.delta,
              "budget": budget, "wall": wall, "peers": peers, "command": " ".join(cmd[1:]), "commit": source_commit()}
    path.write_text(json.dumps(result))
    return result


LONGEST_RUN = 3600.0  # seconds any one run may take before it is stopped as failed


def mean_curve(result: dict) -> list[tuple[float, float]]:
    """The peers' mean accuracy at each evaluation, at the mean of their cumulative own step seconds."""
    return swarm_curve({name: [(e["seconds"], e["acc"]) for e in p["evals"]] for name, p in result["peers"].items()})


def final_acc(curve: list[tuple[float, float]]) -> float:
    tail = curve[-FINAL_POINTS:] if len(curve) > FINAL_POINTS else curve[-1:]
    return statistics.mean(a for _, a in tail)


def per_step(result: dict, key: str) -> float:
    """A per-step figure, mean over steps and peers."""
    return statistics.mean(v for p in result["peers"].values() for v in p[key])


def log_interval(ratios: list[float]) -> tuple[float, float, float]:
    """Geometric mean of finite ratios and its paired 95% t interval (on the log scale), nan with < 2."""
    logs = [math.log(r) for r in ratios if math.isfinite(r) and r > 0]
    if len(logs) < 2:
        return (math.exp(logs[0]) if logs else math.nan), math.nan, math.nan
    mean, sd = statistics.mean(logs), statistics.stdev(logs)
    half = T95.get(len(logs) - 1, 1.96) * sd / math.sqrt(len(logs))
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


def detectable(ratios: list[float]) -> float:
    """The smallest time ratio (below 1) a two-sided 5% test at this many seeds sees with 80% power, from the
    spread of the log ratios (normal approximation with t's critical value)."""
    logs = [math.log(r) for r in ratios if math.isfinite(r) and r > 0]
    if len(logs) < 2:
        return math.nan
    sd = statistics.stdev(logs)
    z80 = statistics.NormalDist().inv_cdf(0.8)
    return math.exp(-(T95.get(len(logs) - 1, 1.96) + z80) * sd / math.sqrt(len(logs)))


def report(results: list[dict]) -> list[str]:
    by = {}
    for r in results:
        by.setdefault(r["policy"], {})[r["seed"]] = r
    if "16" not in by:
        return ["(no fixed G = 16 runs: nothing to compare with)"]
    seeds = sorted(by["16"])
    order = [p for p in ORDER if p in by]
    targets = {s: final_acc(mean_curve(by["16"][s])) for s in seeds}
    t16 = {s: time_to_reach(mean_curve(by["16"][s]), targets[s]) for s in seeds}
    end16 = {s: mean_curve(by["16"][s])[-1][0] for s in seeds}
    ratios_of, at_end_of = {}, {}
    for policy in order:
        ratios_of[policy] = {s: time_to_reach(mean_curve(by[policy][s]), targets[s]) / t16[s]
                             for s in seeds if s in by[policy]}
        at_end_of[policy] = {s: accuracy_at(mean_curve(by[policy][s]), end16[s]) for s in seeds if s in by[policy]}
    lines = [f"{len(seeds)} seeds; target: fixed G = 16's final held-out accuracy per seed (mean "
             f"{statistics.mean(targets.values()):.3f}); tau {results[0]['tau']:g}, delta {results[0]['delta']:g}", "",
             "| policy | time to target / G=16 (median) | geometric mean [95% interval] | reached | accuracy at "
             "G=16's time, minus G=16's [95%] | straggler rate | mean G | generation s a step | step s a step | "
             "decode slots a step | accuracy at its end |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for policy in order:
        runs = [by[policy][s] for s in ratios_of[policy]]
        ratios = list(ratios_of[policy].values())
        gmean, low, high = log_interval(ratios)
        diff, half = paired_interval([at_end_of[policy][s] - at_end_of["16"][s] for s in at_end_of[policy]])
        lines.append(f"| {label_of(policy)} | {statistics.median(ratios):.2f} | {gmean:.2f} [{low:.2f}, {high:.2f}] | "
                     f"{sum(math.isfinite(x) for x in ratios)}/{len(ratios)} | "
                     f"{statistics.mean(at_end_of[policy].values()):.3f}, {diff:+.3f} ± {half:.3f} | "
                     f"{statistics.mean(per_step(r, 'straggler') for r in runs):.3f} | "
                     f"{statistics.mean(per_step(r, 'group_size') for r in runs):.1f} | "
                     f"{statistics.median(per_step(r, 'gen_seconds') for r in runs):.2f} | "
                     f"{statistics.median(per_step(r, 'step_seconds') for r in runs):.2f} | "
                     f"{statistics.median(per_step(r, 'slots') for r in runs):.0f} | "
                     f"{statistics.mean(final_acc(mean_curve(r)) for r in runs):.3f} |")
    fixed = [p for p in order if p not in SAGC_POLICIES and p != "16"]
    for sagc in [p for p in order if p in SAGC_POLICIES]:
        name = label_of(sagc)
        lines += ["", f"{name}: at {len(ratios_of[sagc])} seeds a time ratio {name} / G=16 below "
                      f"{detectable(list(ratios_of[sagc].values())):.2f} is seen with 80% power (two-sided 5%, "
                      "from the spread of the log ratios)"]
        if fixed:
            best = min(fixed, key=lambda p: statistics.median(ratios_of[p].values()))
            paired = [s for s in ratios_of[sagc] if s in ratios_of[best]]
            gmean, low, high = log_interval([ratios_of[sagc][s] / ratios_of[best][s] for s in paired])
            diff, half = paired_interval([at_end_of[sagc][s] - at_end_of[best][s] for s in paired])
            lines.append(f"{name} against the fastest fixed size, G={best}: time to target {name} / G={best} "
                         f"{gmean:.2f} [{low:.2f}, {high:.2f}] (geometric mean, paired over {len(paired)} seeds); "
                         f"accuracy at G=16's time, {name} minus G={best}: {diff:+.3f} ± {half:.3f}")
    return lines


def accuracy_at(curve: list[tuple[float, float]], seconds: float) -> float:
    """Accuracy of a curve at `seconds` of own step time (linear between evaluations, its last one beyond)."""
    return at_seconds([{"seconds": t, "acc": a} for t, a in curve], "acc", seconds)


def lengths_table(files: list[Path]) -> list[str]:
    """Per model, its within-group lengths before training (bench/experiments/group_lengths.py's raw files)."""
    from bench.experiments.group_lengths import SIZES, by_size, group_stats, percentile

    lines = ["| model | groups x G | mean length | cut at the cap | CV (median) | max / median (median; 90th pct) | "
             "straggler rate at tau 2: G = 4 / 8 / 12 / 16 | group utilisation at G = 16 |",
             "|---|---|---|---|---|---|---|---|"]
    for path in files:
        data = json.loads(path.read_text())
        groups = data["groups"]
        spread = [group_stats(g) for g in groups]
        ratios = [x["max_median"] for x in spread]
        rows = {size: by_size(groups, size, (TAU,)) for size in SIZES}
        lines.append(f"| {data['model']} | {len(groups)} x {len(groups[0])} | "
                     f"{statistics.mean(n for g in groups for n in g):.1f} | "
                     f"{1 - statistics.mean(f for g in data['finished'] for f in g):.3f} | "
                     f"{statistics.median(x['cv'] for x in spread):.2f} | {statistics.median(ratios):.2f}; "
                     f"{percentile(ratios, 0.9):.2f} | "
                     + " / ".join(f"{rows[g]['straggler'][TAU]:.2f}" for g in SIZES)
                     + f" | {rows[16]['utilisation']:.2f} |")
    return lines


TAU = 2.0  # the straggler rule the page's lengths table reads (the runs' own tau is in their results)
REAL_TASK = "arith-work-add"  # the real models' worked answers (node/tasks/arith.py)


def real_lengths(files: list[Path]) -> list[str]:
    """The real models' within-group lengths on their worked answers, where measured (no training runs: a G = 16
    step of a 135M model takes minutes on this CPU)."""
    if not files:
        return []
    rewards = []
    for path in files:
        data = json.loads(path.read_text())
        rewards.append(f"{data['model']} {statistics.mean(r for g in data['rewards'] for r in g):.0%}")
    return [f"The real models on `{REAL_TASK}` (1-2 digit sums with the working asked for, temperature 0.7, the "
            "task's 384-token cap; `python -m bench.experiments.group_lengths --model smollm2-135m --task "
            f"{REAL_TASK} --prompts 16 --per-step 4 --temperature 0.7`, Gemma with `--backend vllm`): lengths only, "
            f"before training; sampled rewards {', '.join(rewards)}. SAGC's runs of them are not on this page "
            "(docs/SAGC.md says why).", "", *lengths_table(files), ""]


def plot(results: list[dict], path: Path) -> Path:
    """Left: the peers' mean held-out accuracy over own step seconds, mean over seeds, a line per policy.
    Right: SAGC's group size and straggler rate over steps (mean over seeds and peers)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by: dict[str, list[dict]] = {}
    for r in results:
        by.setdefault(r["policy"], []).append(r)
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    horizon = BUDGET * statistics.median(mean_curve(r)[-1][0] for r in by.get("16", results))
    grid = [horizon * k / 40 for k in range(41)]
    for policy in [p for p in reversed(ORDER) if p in by]:
        mean = [statistics.mean(accuracy_at(mean_curve(r), t) for r in by[policy]) for t in grid]
        left.plot(grid, mean, lw=2.5 if policy == "sagc" else 1.5, label=label_of(policy),
                  ls=":" if policy == "sagc-per-step" else "-")
    left.set(xlabel="own step seconds (mean of the two peers)", ylabel="held-out ID greedy pass@1",
             title="digits-check: accuracy over time (mean over seeds)")
    left.grid(alpha=0.3)
    left.legend()
    handles, twin = [], right.twinx()
    for policy in [p for p in SAGC_POLICIES if p in by]:
        runs = by[policy]
        n = min(len(p["group_size"]) for r in runs for p in r["peers"].values())
        sizes = [statistics.mean(p["group_size"][i] for r in runs for p in r["peers"].values()) for i in range(n)]
        rates = [statistics.mean(p["straggler"][i] for r in runs for p in r["peers"].values()) for i in range(n)]
        dotted = ":" if policy == "sagc-per-step" else "-"
        handles += right.plot(range(n), sizes, ls=dotted, color="tab:blue", label=f"{label_of(policy)}: G")
        handles += twin.plot(range(n), rates, ls=dotted, color="tab:red", alpha=0.6,
                             label=f"{label_of(policy)}: straggler rate")
    twin.set(ylabel="straggler rate (own groups)", ylim=(0, 1))
    right.set(xlabel="step", ylabel="group size G", title="SAGC's choice (mean over seeds and peers)")
    right.grid(alpha=0.3)
    if handles:
        right.legend(handles=handles, fontsize=8, loc="upper right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def section(results: list[dict], out: Path) -> list[str]:
    """The results page's section on SAGC: the lengths before training, the comparison, the plot."""
    steps = results[0]["steps"]
    figure = plot(results, out / "straggler.png")
    return [
        "## 4. SAGC where completions straggle (task `digits-check`, check-sub + check-add, `swarm local`)", "",
        "On `digits` the completions of one prompt are one length give or take a token (straggler rate 0 at every "
        "G: `python -m bench.experiments.group_lengths --model digit-add-bpe --task digits`), so SAGC has nothing "
        "to act on there and keeps G = 16. `digits-check` (node/tasks/checked.py) follows each worked answer with a "
        "heavy-tailed number of checks, a habit the zoo's check-sub and check-add learnt in pre-training. Their "
        "groups before any training (`python -m bench.experiments.group_lengths --model check-sub`, 128 prompts "
        "x 16 samples, the node's own generation, raw lengths in docs/results/straggler/lengths_*.json):", "",
        *lengths_table(sorted(out.glob("lengths_check-*.json"))), "",
        *real_lengths(sorted(out.glob(f"lengths_*_{REAL_TASK}.json"))),
        f"Each run: `swarm local` with the two peers (their own processes and DHT nodes, the node's default transfer "
        f"policy), 8 prompts a step, the task's cap of 224 tokens (nothing cut), held-out ID greedy pass@1 on 128 "
        f"prompts every 5 steps. Fixed G = 16 runs {steps} steps; every other policy of its seed runs until each "
        f"peer has spent {BUDGET}x G = 16's own step seconds (its steps are cheaper). Time = a peer's cumulative "
        "own step seconds (generation, sharing, learning; not evaluation), the mean of the two peers; target = "
        "G = 16's final accuracy (mean of its last 3 evaluations) in the same seed. The machine: 2 cores, both "
        "peers running, one run at a time. Command: `python -m bench.experiments.straggler`, at commit "
        f"{', '.join(sorted({r['commit'] for r in results}))}; one JSON file per run in docs/results/straggler/.", "",
        *([(out / "NOTES.md").read_text().strip(), ""] if (out / "NOTES.md").exists() else []),
        *report(results), "", *same_session(results, out / SAME_SESSION),
        f"![straggler]({os.path.relpath(figure, ROOT / 'docs')})", ""]


SAME_SESSION = "same-session"  # a folder of fixed-size runs re-run beside a later policy's (the machine's speed
#                                drifts between sessions: the comparison that matters is made within one)


def same_session(results: list[dict], folder: Path) -> list[str]:
    """The default SAGC's runs against fixed sizes re-run in their session (the runs in `folder`, same seeds and
    budgets): those rows, and SAGC's time against the fastest of them, paired by seed."""
    rerun = [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))] if folder.is_dir() else []
    if not rerun:
        return []
    sizes = {r["policy"] for r in rerun}
    mixed = [r for r in results if r["policy"] not in sizes and r["policy"] != "sagc-per-step"] + rerun
    lines = report(mixed)
    rows = [line for line in lines if any(line.startswith(f"| {label_of(p)} |") for p in sizes)]
    return [f"Fixed {', '.join(f'G = {p}' for p in sorted(sizes, key=int))} again, in the session of the SAGC "
            f"runs (commit {', '.join(sorted({r['commit'] for r in rerun}))}; raw files in "
            f"docs/results/straggler/{SAME_SESSION}/): the machine's speed drifts between sessions, so this is the "
            "comparison made within one.", "", *lines[2:4], *rows, "",
            *[line for line in lines if line.startswith("SAGC against the fastest")], ""]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=6)
    parser.add_argument("--first-seed", type=int, default=1)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--eval-every", type=int, default=5)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--eval-prompts", type=int, default=128)
    parser.add_argument("--policies", default=",".join(ORDER[:-2] + ORDER[-1:]), help="of sagc (the node's default), "
                        "sagc-per-step (the straggler paper's objective) and fixed sizes")
    parser.add_argument("--models", default=",".join(MODELS), help="the swarm's peers, one each")
    parser.add_argument("--task", default=TASK)
    parser.add_argument("--set", dest="settings", action="append", default=[], metavar="SECTION.FIELD=VALUE",
                        help="passed to every run's `swarm local` (repeatable)")
    parser.add_argument("--tau", type=float, default=2.0)
    parser.add_argument("--delta", type=float, default=0.3)
    parser.add_argument("--out", default=str(OUT))
    parser.add_argument("--report-only", action="store_true")
    parser.add_argument("--section", action="store_true", help="write the results page's section (SECTION.md) "
                        "and its plot into --out")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    policies = args.policies.split(",")
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    if not args.report_only:
        done = 0
        for seed in seeds:  # fixed G = 16 first: its own step seconds are the others' budget
            for policy in sorted(policies, key=lambda p: p != "16"):
                start = time.perf_counter()
                budget = 0.0 if policy == "16" else BUDGET * max(
                    sum(p["step_seconds"]) for p in run_one("16", seed, args, out)["peers"].values())
                r = run_one(policy, seed, args, out, budget)
                done += 1
                print(f"[{done}/{len(policies) * len(seeds)}] {policy} seed {seed}: final accuracy "
                      f"{final_acc(mean_curve(r)):.3f}, {time.perf_counter() - start:.0f} s", flush=True)
    results = [json.loads(p.read_text()) for p in sorted(out.glob(f"*_n{args.steps}.json"))]
    results = [r for r in results if r["seed"] in seeds and r["policy"] in policies]
    print("\n".join(report(results)))
    if args.section:
        (out / "SECTION.md").write_text("\n".join(section(results, out)) + "\n")
        print(f"written: {out / 'SECTION.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
