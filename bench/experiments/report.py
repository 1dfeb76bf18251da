"""The results page (docs/RESULTS.md): its tables, verdicts and prose, from the runs."""
from __future__ import annotations

import json
import math
import os
import statistics
from pathlib import Path

from bench.experiments.grid import (
    ABLATIONS,
    BASE,
    DIGITS_BASE,
    EARLIER_SECTIONS,
    FINAL_POINTS,
    MIXED,
    MIXED_POLICIES,
    MIXED_SCALE,
    MIXES,
    OOD_ERRORS,
    PAIR_SETTINGS,
    PAIRS,
    REAL_MODELS,
    REFERENCE_CELLS,
    REFERENCE_PAIRS,
    STRAGGLER,
    SWARM_VARIANTS,
    TOKENIZER_OF,
    VERDICT_LABELS,
    VERDICT_PAIRS,
)
from bench.experiments.plots import plot_mix, plot_mixed, plot_pairs, plot_verdict
from bench.experiments.runner import provenance
from bench.experiments.runs import alone_runs, alone_runs_in, load, mixed_runs, peer_runs, ran_pairs, verdict_runs
from bench.experiments.stats import (
    EFFECT,
    auc,
    auc_at_equal_time,
    drawdown,
    equal_time,
    final,
    mean_std,
    paired_interval,
    power,
)

EARLIER_NOTE = (
    "## The earlier testbed (task `arith`), in short\n\n"
    "Until issue 22 this page measured task `arith`: one-step sums and differences of operands 0-19 with "
    "4-token answers, and its tables could not show what the swarm is for. Its held-out ID prompts were 97-99% "
    "among those a 150-step run trains on (610 distinct training problems); every model sat at 0.5-1.7% out of "
    "distribution; the F- filter never fired (F-TIS = TIS to 3 decimals in 7 of 8 rows) and SAGC was off (fixed "
    "G = 8); both experts drew right answers of the other's operator by themselves. On 3 seeds every F-TIS - Alone "
    "difference was within noise (final ID, 95% intervals: tiny-add +0.021 ± 0.177, small-add +0.132 ± 0.136, "
    "tiny-sub -0.015 ± 0.039, tiny-add-lora -0.003 ± 0.066; OOD within ± 0.006), F-TIS beat NoIS only where NoIS "
    "did harm, and in a mixed-tokenizer swarm SmolLM2-135M-Instruct (1 seed, 20 steps) ended at 0.065 with "
    "cross-tokenizer F-TIS against 0.224 skipping foreign groups (the cause, found in issue 23 and fixed since: "
    "a foreign group's wrong completions outweighed its right ones and pushed down the end token; with "
    "transfer.foreign_centering, 1 seed, 30 steps, 4 prompts a step, SmolLM2's held-out ID went 0.109 -> 0.383 in "
    "that swarm instead of to 0.000: docs/SECURITY.md, raw run in docs/results/centering/; against skipping "
    "foreign groups on 4 seeds of 30 steps, F-TIS - skip ID AUC -0.007 ± 0.088, no sender demoted: "
    "docs/results/mixed-smollm2/). Its tables and plots: `git show "
    "71466f5:docs/RESULTS.md`; to run it again: `python -m bench.experiments.results "
    "--sections ftis,ablation,mix,mixed --seeds 3 --steps 150 --eval-every 10 --out bench/out/arith "
    "--results bench/out/arith/RESULTS.md`.\n")


SECTION_HEAD = (
    "## 0. The verdict: does joining pay? (tasks `digits` and `digits-check`)\n\n"
    "Task `digits` (node/tasks/digits.py): sums and differences of 1-5-column numbers worked column by column, "
    "every problem with at least one carry or borrow; held out by content (a hash of the problem), out of "
    "distribution = 6 columns. Peers (the complementary pair): digit-sub-bpe passes borrows on but not carries, "
    "digit-add-bpe the reverse (each has the other skill in 0.5% of pre-training columns: bench/complementarity.py "
    "measures the gap), both with the zoo's BPE tokenizer (the char-tokenizer pair digit-sub + digit-add, the "
    "primary pair until 2026-12-04, misreads operand digits past 4 columns: out of distribution it sat at 0-2%); "
    "the LoRA pair trains digit-add-bpe through a LoRA adapter, the tokenizer pair puts digit-sub-bpe beside the "
    "char-tokenizer digit-add (token ids differ: cross-tokenizer F-TIS). The plausible pair, part-sub (0.5M "
    "params) + part-add (1.5M, 4 layers), has each the other's skill in a quarter of its pre-training columns, so "
    "a partner's right working is likely under the receiver (token weights w: 10th percentile 0.79-0.89, against "
    "0.003-0.17 on the complementary pair: docs/results/transfer-weights). The long pair, check-sub + check-add "
    "(digit-*-bpe's skills), trains on task `digits-check`: each worked answer followed by a heavy-tailed number "
    "of checks (section 4), at that task's 224-token cap, where F-TIS's filter drops 7-19% of received rows. "
    "Each peer: 8 prompts a step, G chosen by SAGC (4, 8, 12 or 16; valued per step in the runs before "
    "2026-12-06, per second of a step since: `sagc.price_time`, the runs' settings say which), up to 8 received "
    "groups a step, the zoo's learning rate; "
    "held-out sets of 256 prompts per split, greedy pass@1. Cells: Alone; Alone-2x (16 own prompts a step: as "
    "many groups per update as a swarm peer can have, all own, the control for 'a bigger batch'); NoIS (received "
    "groups at weight 1); F-TIS (the paper's: received groups against their own group's mean, per-token weights "
    "truncated at C); success-gated (only received right answers of prompts our greedy answer gets wrong, at weight "
    "1: Mutual RL's outcome rule); F-TIS-seq (F-TIS with one weight per received completion, exp(mean log-ratio) "
    "truncated at C, instead of per-token weights: transfer.sequence_weights); verified-imitation (received groups "
    "scored against our own greedy answer's reward instead of their group's mean, so a "
    "partner's group right everywhere teaches where we fail, groups we already solve are left out; and received "
    "right answers weigh at least 1; named F-TIS-gated until 2026-12-06; the node's default on tasks whose "
    "verifier checks the work, as digits' does, since 2026-12-03: docs/ALGORITHMS.md); imitation, floor 0 and "
    "floor 2 (verified-imitation with its right answers at F-TIS's weight, or at C = 2); F-TIS-or (the filter as "
    "the seed's summary reads it: every received row at or below its group's mean dropped); HACPO (received rows "
    "at a clipped sequence ratio, scaled by how capable the partners' groups are against ours: arXiv 2603.02604). "
    "The primary endpoint, fixed before the runs: ID AUC. Equal time compares both runs over the same span of "
    "own step seconds (the shorter run's), one experiment per core.")


def fmt(mean: float, std: float) -> str:
    if math.isnan(mean):
        return "n/a"
    return f"{mean:.3f}" if math.isnan(std) else f"{mean:.3f} ± {std:.3f}"


def fmt_diff(mean: float, half: float) -> str:
    if math.isnan(mean):
        return "n/a"
    return f"{mean:+.3f}" + ("" if math.isnan(half) else f" ± {half:.3f}")


def alone_reference_file(results: dict, path: Path) -> Path | None:
    """Section 0's Alone cell per model (mean ID AUC over seeds, and each seed's, with the settings it was measured
    with): the reference `swarm local` prints beside its own peers' AUC (node/observability/report.py
    alone_reference)."""
    entries: dict[str, dict] = {}
    for res in results.values():
        run = res["run"]
        if run["section"] != "verdict" or run["label"] != "Alone":
            continue
        for log in res["peers"].values():
            settings = log.get("settings") or {  # (results written before settings were recorded)
                "task": DIGITS_BASE["task"]["name"], "steps": run["steps"], "eval_every": run["eval_every"],
                "prompts_per_step": DIGITS_BASE["train"]["prompts_per_step"],
                "eval_prompts": DIGITS_BASE["eval"]["prompts"]}
            entry = entries.setdefault(log["model"], {"settings": settings, "aucs": [], "curves": []})
            if entry["settings"] == settings:
                entry["aucs"].append(auc(log["evals"], "train/greedy"))
                entry["curves"].append({e["step"]: e["train/greedy"] for e in log["evals"]})
    if not entries:
        return None

    def mean_curve(curves: list[dict]) -> list[list[float]]:  # [step, mean ID accuracy] where every run has it
        steps = sorted(set.intersection(*(set(c) for c in curves)))
        return [[step, statistics.mean(c[step] for c in curves)] for step in steps]

    path.write_text(json.dumps({m: {"auc": statistics.mean(e["aucs"]), "seeds": len(e["aucs"]), "aucs": e["aucs"],
                                    "settings": e["settings"], "curve": mean_curve(e["curves"])}
                                for m, e in entries.items()}, indent=1) + "\n")
    return path


def step0_figures(results: dict) -> dict[str, dict[str, set[float]]]:
    """{model: {metric: the values its section-0 runs measured before any update}}: one value each where the
    shipped weights load alike everywhere (greedy decoding of the same weights)."""
    out: dict[str, dict[str, set[float]]] = {}
    for res in results.values():
        if res["run"]["section"] != "verdict":
            continue
        for log in res["peers"].values():
            first = next((e for e in log["evals"] if e["step"] == 0), None)
            for key, value in (first or {}).items():
                if key.startswith(("train/greedy", "test/greedy")):
                    out.setdefault(log["model"], {}).setdefault(key, set()).add(value)
    return out


def models_table(results: dict) -> list[str]:
    """Section 0's models: the shipped weights each run loaded (SHA-256 of model.safetensors, from the zoo's
    manifest; a LoRA entry loads its base's, and its fresh adapter leaves the outputs as they are) and their
    held-out greedy pass@1 before any update, which a fresh clone reproduces (tests/models/test_zoo_page.py)."""
    from node.models.zoo import ZOO, weights_spec
    from node.models.zoo_store import active_zoo, read_manifest

    figures = step0_figures(results)
    if not figures:
        return []
    manifest = read_manifest(active_zoo())["models"]
    lines = ["The models (shipped weights, node/models/zoo_weights; held-out greedy pass@1 before any update, the "
             "same in every run that loaded them):", "",
             "| model | weights (SHA-256 of model.safetensors) | params | ID | ID sums | ID differences | OOD |",
             "|---|---|---|---|---|---|---|"]

    def value(model: str, key: str) -> str:
        values = sorted(figures[model].get(key, ()))
        return "/".join(f"{v:.3f}" for v in values) or "-"

    for model in sorted(figures):
        base = weights_spec(model).name if model in ZOO else model
        entry = manifest.get(base, {})
        digest = entry.get("files", {}).get("model.safetensors", "")[:16] or "-"
        weights = digest if base == model else f"{digest} ({base}'s, through a fresh LoRA adapter)"
        lines.append(f"| {model} | {weights} | {entry.get('params', '-')} | {value(model, 'train/greedy')} | "
                     f"{value(model, 'train/greedy.sum')} | {value(model, 'train/greedy.difference')} | "
                     f"{value(model, 'test/greedy')} |")
    return [*lines, ""]


def above(mean: float, half: float, at_least: float = 0.0) -> bool:
    """Whether a paired 95% interval (mean ± half) lies wholly above `at_least` ('beyond noise'; nan: no)."""
    return not math.isnan(half) and mean - half > at_least


def below(mean: float, half: float) -> bool:
    """Whether a paired 95% interval lies wholly below 0 ('below, beyond noise'; nan: no)."""
    return not math.isnan(half) and mean + half < 0


def verdict_word(mean: float, half: float, at_least: float = 0.0) -> str:
    """'beyond noise' when the 95% interval clears `at_least`, 'below, beyond noise' when it is under 0."""
    if math.isnan(mean):
        return "n/a"
    if math.isnan(half):
        return f"{mean:+.3f} (one seed)"
    if above(mean, half, at_least):
        return f"{mean:+.3f} ± {half:.3f}, above {at_least:+.2f} beyond noise"
    if below(mean, half):
        return f"{mean:+.3f} ± {half:.3f}, below 0 beyond noise"
    return f"{mean:+.3f} ± {half:.3f}, within noise"


def verdict_tables(results: dict) -> tuple[list[str], dict, dict]:
    """Section 0: per pair, each cell's endpoints and mechanisms, the paired differences with their power, and
    the issue's goals checked. Returns the lines, the verdict figures and the curves to plot."""
    lines, figures, curves = [], {}, {}
    primary = next(iter(VERDICT_PAIRS))
    for pair_name, pair in VERDICT_PAIRS.items():
        cells = {label: verdict_runs(results, pair, label) for label in VERDICT_LABELS}
        cells = {label: runs for label, runs in cells.items() if runs}
        if "F-TIS" not in cells or "Alone" not in cells:
            continue
        seeds = sorted(set(cells["F-TIS"]) & set(cells["Alone"]))
        first = next(res["run"] for res in results.values() if res["run"]["section"] == "verdict"
                     and tuple(res["run"]["models"]) == pair)
        notes = "".join([f"; task `{pair_task(pair_name)}`" if pair_name in PAIR_SETTINGS else "",
                         "; secondary: fewer seeds" if pair_name != primary and pair_name not in REFERENCE_PAIRS
                         else ""])
        lines += [f"### {pair_name} pair: {' + '.join(pair)} ({len(seeds)} seeds, {first['steps']} steps, evaluated "
                  f"every {first['eval_every']}{notes})", "",
                  "Per cell, mean ± std over seeds: **ID AUC** (primary endpoint: the mean held-out ID greedy "
                  f"pass@1 over the evaluations after step 0), final ID and OOD (mean of the last {FINAL_POINTS} "
                  "evaluations); mechanisms, mean over steps: G (SAGC's group size), straggler rate (own groups "
                  "whose longest completion passed tau x their median), received groups trained on, filtered "
                  "share (received and own rows the policy's filter zeroed), gated (success-gated, "
                  "verified-imitation: groups left out because our greedy answer was right), floored (received "
                  "right completions the floor lifted: verified-imitation; '-' where a run predates the count), own "
                  "step seconds (median).", "",
                  "| peer | cell | seeds | ID AUC | final ID | final OOD | G | straggler rate | received / step | "
                  "filtered share | gated / step | floored / step | step s |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for model in pair:
            for label, runs in cells.items():
                logs = [logs[model] for logs in runs.values()]
                row = [fmt(*mean_std([auc(log["evals"], "train/greedy") for log in logs])),
                       fmt(*mean_std([final(log["evals"], "train/greedy") for log in logs])),
                       fmt(*mean_std([final(log["evals"], "test/greedy") for log in logs]))]
                mech = [statistics.mean(x for log in logs for x in log.get(k, [math.nan]))
                        for k in ("group_size", "straggler", "received", "filtered", "gated", "floored")]
                floored = "-" if math.isnan(mech[5]) else f"{mech[5]:.1f}"
                step_s = statistics.median(x for log in logs for x in log["step_seconds"])
                lines.append(f"| {model} | {label} | {len(logs)} | " + " | ".join(row)
                             + f" | {mech[0]:.1f} | {mech[1]:.3f} | {mech[2]:.1f} | {mech[3]:.3f} | {mech[4]:.1f} "
                             f"| {floored} | {step_s:.2f} |")
                curves.setdefault(pair_name, {}).setdefault(model, {})[label] = logs
        lines += kind_table(pair, cells)
        lines += ["", f"Paired differences (same model, seed and prompts), mean ± 95% t interval; power = the "
                  f"chance a two-sided 5% test at this many seeds sees a true {EFFECT:+.2f}, from the observed spread "
                  "of the differences; 'seeds for 80%' = how many would give 80%.", "",
                  "| peer | comparison | endpoint | difference | sd | power for +0.05 | seeds for 80% |",
                  "|---|---|---|---|---|---|---|"]
        comparisons = [("F-TIS", "Alone"), ("F-TIS", "Alone-2x"), ("F-TIS", "NoIS"), ("success-gated", "Alone"),
                       ("NoIS", "Alone"), ("F-TIS-seq", "Alone"), ("F-TIS-seq", "Alone-2x"), ("F-TIS-seq", "F-TIS"),
                       ("verified-imitation", "Alone"), ("verified-imitation", "Alone-2x"),
                       ("verified-imitation", "success-gated"), ("verified-imitation", "F-TIS"),
                       ("imitation, floor 0", "F-TIS"), ("imitation, floor 2", "Alone-2x"),
                       ("imitation, floor 2", "verified-imitation"), ("F-TIS-or", "F-TIS")]
        comparisons = list(dict.fromkeys(comparisons + [(cell, control) for cell in REFERENCE_POLICIES
                                                        for control in ("Alone", "Alone-2x")]))
        for model in pair:
            for a, b in comparisons:
                if a not in cells or b not in cells:
                    continue
                both = sorted(set(cells[a]) & set(cells[b]))
                runs = [(cells[a][s][model]["evals"], cells[b][s][model]["evals"]) for s in both]
                endpoints = {
                    "ID AUC, equal steps": [auc(p, "train/greedy") - auc(q, "train/greedy") for p, q in runs],
                    "ID AUC, equal time": [(lambda t: t[0] - t[1])(auc_at_equal_time(p, q, "train/greedy"))
                                           for p, q in runs],
                    "OOD AUC, equal steps": [auc(p, "test/greedy") - auc(q, "test/greedy") for p, q in runs],
                    "final ID": [final(p, "train/greedy") - final(q, "train/greedy") for p, q in runs],
                }
                for endpoint, diffs in endpoints.items():
                    if not diffs:
                        continue
                    mean, half = paired_interval(diffs)
                    sd, achieved, needed = power(diffs)
                    figures[(pair_name, model, f"{a} - {b}", endpoint)] = (mean, half, len(diffs))
                    lines.append(f"| {model} | {a} − {b} | {endpoint} | {fmt_diff(mean, half)} | "
                                 + ("n/a | n/a | n/a |" if math.isnan(sd) else
                                    f"{sd:.3f} | {achieved:.2f} | {needed} |"))
        lines += ["", *verdict_goals(figures, pair_name, pair), ""]
    lines += reference_table(figures)
    return lines, {"|".join(map(str, k)): v for k, v in figures.items()}, curves


REFERENCE_POLICIES = tuple(c for c in REFERENCE_CELLS if not c.startswith("Alone"))  # the policies that share


GOAL = 0.05  # issue 57: some policy beats Alone-2x by this much held-out AUC, both peers, ID and OOD, beyond noise


def pair_task(pair_name: str) -> str:
    """The task a verdict pair's runs train on (its PAIR_SETTINGS, else the verdict's base task)."""
    return dict(PAIR_SETTINGS.get(pair_name, ())).get("task.name", DIGITS_BASE["task"]["name"])


def reference_table(figures: dict) -> list[str]:
    """The reference ablation in one table: each sharing policy against Alone-2x (ID AUC at equal steps and
    equal time, OOD AUC at equal steps) and against Alone (ID AUC, equal steps), per pair and peer, paired 95%
    intervals; then per pair the policy that wins (the largest gain over Alone-2x of the peer it helps least, ID AUC at
    equal steps, among those that leave no peer below Alone beyond noise), and the issue's goal checked."""
    endpoints = (("Alone-2x", "ID AUC, equal steps"), ("Alone-2x", "ID AUC, equal time"),
                 ("Alone-2x", "OOD AUC, equal steps"), ("Alone", "ID AUC, equal steps"))
    rows, verdicts = [], []
    for name in REFERENCE_PAIRS:
        pair = VERDICT_PAIRS[name]
        ran = [c for c in REFERENCE_POLICIES if all((name, m, f"{c} - Alone-2x", "ID AUC, equal steps") in figures
                                                    for m in pair)]
        if not ran:
            continue
        scores = {}
        for cell in ran:
            harmless, worst, goal = True, math.inf, True
            for model in pair:
                got = [figures.get((name, model, f"{cell} - {control}", e), (math.nan, math.nan, 0))
                       for control, e in endpoints]
                seeds = min(n for _, _, n in got)
                rows.append(f"| {name} | {cell} | {model} | {seeds} | "
                            + " | ".join(fmt_diff(m, h) for m, h, _ in got) + " |")
                (m_id, h_id, _), _, (m_ood, h_ood, _), (m_alone, h_alone, _) = got
                harmless &= not below(m_alone, h_alone)
                worst = min(worst, m_id)
                goal &= m_id - h_id >= GOAL and m_ood - h_ood >= GOAL  # (nan: not met)
            scores[cell] = (harmless, worst, goal)
        safe = [c for c in ran if scores[c][0]]
        best = max(safe or ran, key=lambda c: scores[c][1])
        met = [c for c in ran if scores[c][2]]
        verdicts.append(f"| {name} | `{pair_task(name)}` | {best} ({scores[best][1]:+.3f} for the peer it helps least"
                        f"{'' if scores[best][0] else '; a peer below Alone beyond noise'}) | "
                        f"{', '.join(met) if met else 'missed'} | "
                        f"{', '.join(c for c in ran if not scores[c][0]) or 'none'} |")
    if not rows:
        return []
    return ["### The reference ablation: which policy wins where", "",
            "Every sharing policy of the registry against its two controls, paired by seed (mean ± 95% t interval; "
            "'seeds' = the pairs of runs).", "",
            "| pair | policy | peer | seeds | ID AUC − Alone-2x, equal steps | ID AUC − Alone-2x, equal time | "
            "OOD AUC − Alone-2x, equal steps | ID AUC − Alone, equal steps |", "|---|---|---|---|---|---|---|---|",
            *rows, "",
            f"Per pair: the winner (largest ID AUC gain over Alone-2x, equal steps, of the peer it helps least, "
            f"among the policies that leave no peer below Alone beyond noise); the goal (a policy above Alone-2x by "
            f"at least {GOAL:+.2f} for both peers, ID and OOD, beyond noise: the interval's lower end at or above "
            f"it); the policies that leave a peer below Alone beyond noise.", "",
            "| pair | task | wins | goal met by | a peer below Alone |", "|---|---|---|---|---|", *verdicts, ""]


def kind_table(pair: tuple[str, str], cells: dict) -> list[str]:
    """ID AUC per kind of problem (digits: sums, differences): a peer's own skill and its partner's, for the
    cells whose runs recorded it (node/evaluation.py, since this table was added)."""
    rows = []
    for model in pair:
        for label, runs in cells.items():
            logs = [logs[model] for logs in runs.values()]
            kinds = sorted({k.split(".", 1)[1] for log in logs for e in log["evals"] for k in e
                            if k.startswith("train/greedy.")})
            if not kinds or not all(f"train/greedy.{k}" in e for log in logs for e in log["evals"] for k in kinds):
                continue
            cell = [f"{k} " + fmt(*mean_std([auc(log["evals"], f"train/greedy.{k}") for log in logs])) for k in kinds]
            rows.append(f"| {model} | {label} | {len(logs)} | {'; '.join(cell)} |")
    if not rows:
        return []
    return ["", "ID AUC per kind of problem (mean ± std over seeds): a peer's own operator and its partner's.", "",
            "| peer | cell | seeds | ID AUC per kind |", "|---|---|---|---|", *rows]


def verdict_goals(figures: dict, pair_name: str, pair: tuple[str, str]) -> list[str]:
    """Issue 22's goals, each checked against the paired intervals."""
    lines = ["| goal | peer | result |", "|---|---|---|"]

    def get(model, comparison, endpoint):
        return figures.get((pair_name, model, comparison, endpoint), (math.nan, math.nan, 0))

    for model in pair:
        for control in ("Alone", "Alone-2x"):
            for endpoint in ("ID AUC, equal steps", "ID AUC, equal time", "OOD AUC, equal steps"):
                mean, half, _ = get(model, f"F-TIS - {control}", endpoint)
                lines.append(f"| F-TIS beats {control} by ≥ {EFFECT:.2f} ({endpoint}) | {model} | "
                             f"{verdict_word(mean, half, EFFECT)} |")
        mean, half, _ = get(model, "F-TIS - Alone", "ID AUC, equal steps")
        lines.append(f"| not below Alone | {model} | {'no' if below(mean, half) else 'holds'} "
                     f"({fmt_diff(mean, half)}) |" if not math.isnan(mean) else f"| not below Alone | {model} | n/a |")
        mean, half, _ = get(model, "F-TIS - NoIS", "ID AUC, equal steps")
        lines.append(f"| F-TIS at least NoIS | {model} | {verdict_word(mean, half)} |")
    return lines


def ftis_tables(results: dict) -> tuple[list[str], dict]:
    """The F-TIS table (final accuracy) and the paired differences to Alone, at equal steps and equal time."""
    lines, verdict = [], {}
    for split, title in (("train", "in distribution (arith train split, operands 0-19)"),
                         ("test", "out of distribution (arith test split, operands 20-99)")):
        key = f"{split}/greedy"
        lines += [f"### Held-out greedy pass@1, {title}", "",
                  f"Final accuracy (the mean of a run's last {FINAL_POINTS} evaluations; mean ± std over seeds); "
                  "Δ = paired difference to Alone (same model, seed and prompts) with its 95% t interval, at equal "
                  "steps and at equal wall clock (the swarm peer's accuracy when its own step time equals "
                  "Alone's at those evaluations).", "",
                  "| pair | peer | Alone | " + " | ".join(v.upper() for v in SWARM_VARIANTS)
                  + " | F-TIS Δ, equal steps | F-TIS Δ, equal time |",
                  "|---|---|---|" + "---|" * len(SWARM_VARIANTS) + "---|---|"]
        for pair_name, pair in ran_pairs(results).items():
            for model in pair:
                alone = alone_runs(results, model)
                cells = [fmt(*mean_std([final(log["evals"], key) for log in alone.values()]))]
                for variant in SWARM_VARIANTS:
                    runs = peer_runs(results, "ftis", pair, variant)
                    cells.append(fmt(*mean_std([final(logs[model]["evals"], key) for logs in runs.values()])))
                ftis = peer_runs(results, "ftis", pair, "f-tis")
                seeds = sorted(set(ftis) & set(alone))
                steps_d = [final(ftis[s][model]["evals"], key) - final(alone[s]["evals"], key) for s in seeds]
                time_d = [equal_time(ftis[s][model]["evals"], alone[s]["evals"], key) - final(alone[s]["evals"], key)
                          for s in seeds]
                d_steps = paired_interval(steps_d) if seeds else (math.nan, math.nan)
                d_time = paired_interval(time_d) if seeds else (math.nan, math.nan)
                verdict[(pair_name, model, split)] = (d_steps, d_time)
                lines.append(f"| {pair_name} | {model} | " + " | ".join(cells)
                             + f" | {fmt_diff(*d_steps)} | {fmt_diff(*d_time)} |")
        lines.append("")
    return lines, verdict


def verdict_lines(results: dict, verdict: dict) -> list[str]:
    """The issue's claims, checked against the table: F-TIS above Alone for every peer (ID and OOD, equal
    steps and equal time: the lower end of the 95% interval above 0 is 'significant'), the weaker partner
    (lower Alone accuracy in distribution) gaining most."""
    lines = ["### The claims, checked", "",
             "| pair | weaker partner (Alone ID) | claim | equal steps | equal time |", "|---|---|---|---|---|"]

    def word(mean: float, half: float) -> str:
        if math.isnan(mean):
            return "n/a"
        if above(mean, half):
            return f"yes ({mean:+.3f}, significant)"
        if mean > 0:
            return f"yes ({mean:+.3f}, within noise)"
        if below(mean, half):
            return f"no ({mean:+.3f}, significant)"
        return f"no ({mean:+.3f}, within noise)"

    for pair_name, pair in ran_pairs(results).items():
        alone_id = {m: statistics.mean([final(log["evals"], "train/greedy") for log in alone_runs(results, m).values()]
                                       or [math.nan]) for m in pair}
        if any(math.isnan(v) for v in alone_id.values()) or (pair_name, pair[0], "train") not in verdict:
            continue
        weaker = min(pair, key=lambda m: alone_id[m])
        for model in pair:
            for split in ("train", "test"):
                d_steps, d_time = verdict[(pair_name, model, split)]
                lines.append(f"| {pair_name} | {weaker} | F-TIS > Alone: {model}, {'ID' if split == 'train' else 'OOD'}"
                             f" | {word(*d_steps)} | {word(*d_time)} |")
        for split in ("train", "test"):
            gains = {m: verdict[(pair_name, m, split)] for m in pair}
            cells = []
            for i in (0, 1):  # equal steps, equal time
                g = {m: gains[m][i][0] for m in pair}
                other = next(m for m in pair if m != weaker)
                cells.append(("yes" if g[weaker] >= g[other] else "no")
                             + f" ({weaker} {g[weaker]:+.3f} vs {other} {g[other]:+.3f})")
            lines.append(f"| {pair_name} | {weaker} | weaker gains most, {'ID' if split == 'train' else 'OOD'} | "
                         f"{cells[0]} | {cells[1]} |")
    return [*lines, ""]


def nois_check(results: dict) -> list[str]:
    """F-TIS minus NoIS, paired by seed, per peer (ID and OOD)."""
    lines = ["### F-TIS against naive sharing (NoIS)", "",
             "| pair | peer | F-TIS − NoIS, ID | F-TIS − NoIS, OOD |", "|---|---|---|---|"]
    for pair_name, pair in ran_pairs(results).items():
        ftis, nois = peer_runs(results, "ftis", pair, "f-tis"), peer_runs(results, "ftis", pair, "nois")
        seeds = sorted(set(ftis) & set(nois))
        for model in pair:
            cells = []
            for split in ("train", "test"):
                key = f"{split}/greedy"
                diffs = [final(ftis[s][model]["evals"], key) - final(nois[s][model]["evals"], key) for s in seeds]
                cells.append(fmt_diff(*paired_interval(diffs)) if diffs else "n/a")
            lines.append(f"| {pair_name} | {model} | {cells[0]} | {cells[1]} |")
    return [*lines, ""]


def time_table(results: dict) -> list[str]:
    lines = ["### What sharing costs in learner time", "",
             "| pair | peer | Alone step s (median) | F-TIS step s (median) | ratio | received groups / step | "
             "received reward | own reward, last 20% (Alone → F-TIS) |", "|---|---|---|---|---|---|---|---|"]
    for pair_name, pair in ran_pairs(results).items():
        ftis = peer_runs(results, "ftis", pair, "f-tis")
        for model in pair:
            alone = alone_runs(results, model)
            if not ftis or not alone:
                continue
            a = statistics.median(x for log in alone.values() for x in log["step_seconds"])
            f = statistics.median(x for logs in ftis.values() for x in logs[model]["step_seconds"])
            rec = statistics.mean(x for logs in ftis.values() for x in logs[model]["received"])
            rr = statistics.mean(x for logs in ftis.values() for x in logs[model]["received_reward"])
            tail = lambda log: statistics.mean(log["reward"][-max(len(log["reward"]) // 5, 1):])  # noqa: E731
            ra = statistics.mean(tail(log) for log in alone.values())
            rf = statistics.mean(tail(logs[model]) for logs in ftis.values())
            lines.append(f"| {pair_name} | {model} | {a:.3f} | {f:.3f} | {f / a:.2f} | {rec:.1f} | {rr:.3f} | "
                         f"{ra:.3f} → {rf:.3f} |")
    return [*lines, ""]


def ablation_table(results: dict) -> list[str]:
    pair = PAIRS["expertise"]
    rows = [("g=50 (default)", "ftis", "f-tis", ()), *((label, "ablation", "f-tis", settings)
                                                      for label, settings in ABLATIONS),
            ("F-NoIS (no weights)", "ftis", "f-nois", ())]
    lines = ["## 2. Ablations (expertise pair, F-TIS)", "",
             "| setting | seeds | " + " | ".join(f"{m} ID | {m} OOD" for m in pair) + " | filtered share |",
             "|---|---|" + "---|---|" * len(pair) + "---|"]
    for label, section, policy, settings in rows:
        runs = peer_runs(results, section, pair, policy, settings)
        if section == "ftis":
            runs = {s: v for s, v in runs.items() if s < 2}  # the ablations' seeds
        if not runs:
            continue
        cells = []
        for model in pair:
            for split in ("train", "test"):
                cells.append(fmt(*mean_std([final(logs[model]["evals"], f"{split}/greedy")
                                            for logs in runs.values()])))
        filt = statistics.mean(x for logs in runs.values() for m in pair for x in logs[m]["filtered"])
        lines.append(f"| {label} | {len(runs)} | " + " | ".join(cells) + f" | {filt:.3f} |")
    return [*lines, ""]


def mix_table(results: dict) -> tuple[list[str], dict]:
    pair = PAIRS["expertise"]
    lines = ["## 3. SAPO's mix: own / received groups per step (expertise pair, F-TIS, 8 prompts x 8 generated "
             "a step)", "",
             "Cumulative reward = the sum over steps of the step's mean sampled reward of own completions (SAPO's "
             "measure: 561.8 alone -> 1093.3 at 4/4, +94%; 945.9 at 2/6).", "",
             "| own / received | " + " | ".join(f"{m} cumulative reward | vs 8/0 | {m} ID final" for m in pair)
             + " |", "|---|" + "---|---|---|" * len(pair)]
    curves: dict = {}
    base: dict = {}
    for own, received in MIXES:
        label = f"{own}/{received}"
        runs = {}
        for res in results.values():
            run = res["run"]
            if run["section"] == "mix" and run["label"] == label:
                runs[run["seed"]] = {log["model"]: log for log in res["peers"].values()}
        if not runs:
            continue
        cells = []
        for model in pair:
            cum = statistics.mean(sum(logs[model]["reward"]) for logs in runs.values())
            base.setdefault(model, cum)
            acc = mean_std([final(logs[model]["evals"], "train/greedy") for logs in runs.values()])
            cells += [f"{cum:.1f}", f"{100 * (cum / base[model] - 1):+.0f}%", fmt(*acc)]
            curves.setdefault(model, {})[label] = [statistics.mean(v) for v in zip(
                *[logs[model]["reward"] for logs in runs.values()], strict=True)]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return [*lines, ""], curves


def mixed_tables(results: dict) -> tuple[list[str], dict]:
    """Section 5: per swarm, final accuracy by policy with paired differences, then stability and sharing."""
    lines, curves = [], {}
    for name, models in MIXED.items():
        by_policy = {label: mixed_runs(results, name, label) for label, _, _ in MIXED_POLICIES}
        if not any(by_policy.values()):
            continue
        if not lines:
            lines += ["## 5. Mixed tokenizers: skip foreign groups, ratio = 1, or cross-tokenizer F-TIS", "",
                      "Every peer of one swarm follows the same policy for groups from peers with another tokenizer: "
                      "*skip foreign* (swarm.foreign_tokenizers off: the char peers share with each other, the BPE "
                      "peers train on their own groups), *ratio = 1* (NoIS: trained on as if on-policy, which is "
                      "what swarms that share text do; same-tokenizer groups too), *cross-tokenizer F-TIS* (the "
                      "text re-tokenized, one sequence-level weight per completion, the F- filter on the same "
                      "divergence: node/rl/transfer). Alone: each peer without a swarm (same seed and prompts). "
                      "Differences are paired by seed, with their 95% t interval.", ""]
        seeds = sorted(set().union(*by_policy.values()))
        steps = next(res["run"]["steps"] for res in results.values()
                     if res["run"]["section"] == "mixed" and tuple(res["run"]["models"]) == models)
        scale = ", ".join(f"{k} = {v}" for k, v in MIXED_SCALE[name]) or "as sections 1-3"
        lines += [f"### Swarm: {' + '.join(models)} ({len(seeds)} seeds, {steps} steps; {scale})", ""]
        alone = {m: alone_runs_in(results, "mixed", m) if name == "zoo" else {} for m in models}
        for split, title in (("train", "in distribution"), ("test", "out of distribution")):
            key = f"{split}/greedy"
            lines += [f"Held-out greedy pass@1, {title} (final: mean of the last {FINAL_POINTS} evaluations; "
                      + ("mean ± std over seeds)" if len(seeds) > 1 else "one seed: no spread, no interval)"), "",
                      "| peer | tokenizer | Alone | " + " | ".join(label for label, _, _ in MIXED_POLICIES)
                      + " | F-TIS − skip | F-TIS − ratio 1 |", "|---|---|---|" + "---|" * len(MIXED_POLICIES)
                      + "---|---|"]
            for model in models:
                finals = {label: {s: final(logs[model]["evals"], key) for s, logs in runs.items()}
                          for label, runs in by_policy.items()}
                cells = [fmt(*mean_std([final(log["evals"], key) for log in alone[model].values()]))]
                cells += [fmt(*mean_std(list(finals[label].values()))) for label, _, _ in MIXED_POLICIES]
                ftis = finals["cross-tokenizer F-TIS"]
                for other in ("skip foreign", "ratio = 1"):
                    both = sorted(set(ftis) & set(finals[other]))
                    cells.append(fmt_diff(*paired_interval([ftis[s] - finals[other][s] for s in both]))
                                 if both else "n/a")
                lines.append(f"| {model} | {TOKENIZER_OF.get(model, 'char, zoo')} | " + " | ".join(cells) + " |")
            lines.append("")
        lines += ["Stability and sharing: worst fall = the largest drop of held-out ID accuracy from its best "
                  "evaluation so far to a later one (mean over seeds / the worst seed); groups used = received "
                  "groups trained on per step, of which from another tokenizer; refused = received records "
                  "rejected (by any reason, e.g. \"length\" for text longer than we generate); filtered = rows the "
                  "F- filter zeroed.", "",
                  "| peer | policy | worst fall, ID | final ID, spread over seeds | groups used / step | of which "
                  "foreign | records refused / step | filtered share | own reward, last 20% |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for model in models:
            for label, runs in (("Alone", alone[model] and {s: {model: v} for s, v in alone[model].items()}),
                                *by_policy.items()):
                if not runs:
                    continue
                logs = [r[model] for r in runs.values()]
                falls = [drawdown([e["train/greedy"] for e in log["evals"]]) for log in logs]
                fin = [final(log["evals"], "train/greedy") for log in logs]
                used = statistics.mean(x for log in logs for x in log["received"])
                foreign = statistics.mean(x for log in logs for x in log["foreign"])
                refused = statistics.mean(x for log in logs for x in log.get("rejected", [math.nan]))
                filt = statistics.mean(x for log in logs for x in log["filtered"])
                tail = statistics.mean(statistics.mean(log["reward"][-max(len(log["reward"]) // 5, 1):])
                                       for log in logs)
                lines.append(f"| {model} | {label} | {statistics.mean(falls):.3f} / {max(falls):.3f} | "
                             f"{min(fin):.3f} - {max(fin):.3f} | {used:.1f} | {foreign:.1f} | {refused:.1f} | "
                             f"{filt:.3f} | {tail:.3f} |")
                curves.setdefault(name, {}).setdefault(model, {})[label] = logs
        lines.append("")
    return lines, curves


def report(out: Path, results_md: Path, meta: dict) -> Path:
    results = load(out)
    figures = results_md.parent / "results"
    figures.mkdir(parents=True, exist_ok=True)
    verdict_lines_, verdict_figures, verdict_curves = verdict_tables(results)
    verdict_plots = plot_verdict(verdict_curves, figures)
    alone_reference_file(results, figures / "alone_reference.json")
    ftis_lines, verdict = ftis_tables(results)
    mix_lines, curves = mix_table(results)
    mixed_lines, mixed_curves = mixed_tables(results)
    plots = plot_pairs(results, figures) if any(r["run"]["section"] == "ftis" for r in results.values()) else []
    mix_plot = plot_mix(curves, figures)
    mixed_plots = plot_mixed(mixed_curves, figures)
    rel = lambda p: os.path.relpath(p, results_md.parent)  # noqa: E731
    ran = {r["run"]["section"] for r in results.values()}  # a section without results leaves no empty tables
    arith = [
        "Setting of sections 1-3 and 5: task `arith` (sums and differences, operands 0-19; it needs both of the zoo's "
        "expertises); "
        "16 prompts x G = 8 a step, up to 16 received groups a step, learning rates from the zoo (section 5's "
        "SmolLM2 swarm is scaled down, as it says). Held-out sets (node/evaluation.py): "
        f"{BASE['eval']['prompts']} prompts of each split at item indices training never draws; accuracy is greedy "
        "pass@1 (evaluated as the table above says). The paper's MATH-500 table has the same shape: "
        "Alone vs F-TIS for each peer of a pair (the policies: docs/ALGORITHMS.md).", ""]
    earlier = ran & set(EARLIER_SECTIONS)
    lines = [
        "# Results: does joining the swarm pay?", "",
        f"Every figure below comes from bench/experiments/results.py on {meta['machine']} (one core per experiment; "
        "one JSON file per experiment under its --out folder, and "
        "`--report-only` rebuilds this page from them). The experiments of each section:", "",
        *provenance(out, results),
        *([(out / "NOTES.md").read_text().strip(), ""] if (out / "NOTES.md").exists() else []),
        *([SECTION_HEAD, "", *models_table(results), *verdict_lines_,
           *[f"![{p.stem}]({rel(p)})" for p in verdict_plots], "",
           *([OOD_ERRORS.read_text().strip(), ""] if OOD_ERRORS.exists() else [])]
          if verdict_lines_ else []),
        *([STRAGGLER.read_text().strip(), ""] if STRAGGLER.exists() else []),
        *([REAL_MODELS.read_text().strip(), ""] if REAL_MODELS.exists() else []),
        *(["## The earlier testbed (task `arith`)", "", *arith] if earlier else [EARLIER_NOTE]),
        *(["## 1. F-TIS table", "", *ftis_lines, *verdict_lines(results, verdict), *nois_check(results),
           *time_table(results), *[f"![{p.stem}]({rel(p)})" for p in plots], ""] if "ftis" in ran else []),
        *(ablation_table(results) if "ablation" in ran else []), *(mix_lines if "mix" in ran else []),
        *([f"![mix]({rel(mix_plot)})", ""] if mix_plot else []),
        *mixed_lines, *[f"![{p.stem}]({rel(p)})" for p in mixed_plots], "",
    ]
    results_md.write_text("\n".join(lines) + "\n")
    (out / "verdict.json").write_text(json.dumps({"|".join(k): v for k, v in verdict.items()}))
    (out / "digits_verdict.json").write_text(json.dumps(verdict_figures))
    return results_md
