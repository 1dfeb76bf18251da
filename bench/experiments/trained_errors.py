"""Why a gain in distribution does not reach out of it: the first mistakes of trained peers, by kind.

Trains cells of a verdict pair (the results page's runs: bench/experiments/grid.py's configuration, seeds and
steps) in this process and classifies each trained peer's greedy completions of the held-out prompts at their
first wrong step (bench/experiments/error_kinds.py: an operand digit misread, the carry / borrow term, a step's
arithmetic, the number of steps, the answer, a check), beside the same counts for the weights before training.
A partner can teach the skill its receiver lacks (the carry / borrow term); if the mistakes left out of
distribution are of other kinds, no transfer rule moves out-of-distribution accuracy much. A second table scores
each carrying column reached with the steps before it right (error_kinds.column_outcomes): the share of right
steps there by column, in distribution (columns 1-5) and out of it (6 columns), says whether the received skill
still acts at a longer problem's columns, and at its 6th.

    python -m bench.experiments.trained_errors --pair long --cells Alone,verified-imitation --seeds 2
        [--steps 150] [--prompts 256] [--workers 2] [--out FILE.json]

One JSON file (per cell, seed, peer and split: the counts of each kind) and a markdown table on stdout.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import json
import multiprocessing
import os
import sys
from pathlib import Path

from bench.experiments.error_kinds import (
    KINDS,
    by_operator,
    column_counts,
    completions_of,
    greedy_completions,
    mistake_counts,
    table_head,
    table_rows,
)

SPLITS = ("train", "test")


def train_and_classify(run, prompts: int) -> dict:
    """Trains one run (error_kinds' counts of each of its peers, per split, after its last step)."""
    from bench.experiments.runner import execute
    from node.tasks.base import completion_cap

    found: dict = {}
    columns: dict = {}

    def read(_names, peers):
        for peer in peers:
            cap = completion_cap(peer.task)
            name = peer.cfg.model.name
            found[name], columns[name] = {}, {}
            for split in SPLITS:
                done = greedy_completions(peer.loaded.model, peer.loaded.tokenizer, peer.task, split, prompts, cap)
                found[name][split] = by_operator(mistake_counts(done))
                columns[name][split] = column_counts(done)

    log = execute(run, {}, after=read)
    final = {entry["model"]: entry["evals"][-1] for entry in log.values() if entry["evals"]}  # the node's own
    return {"label": run.label, "seed": run.seed, "models": list(run.models), "peers": found, "columns": columns,
            "final_eval": final}


def before_training(model: str, task_name: str, prompts: int) -> tuple[dict, dict]:
    """(by_operator counts, column_counts) per split of a model's weights before any training."""
    from node.tasks import get_task
    from node.tasks.base import completion_cap

    cap = completion_cap(get_task(task_name))
    done = {split: completions_of(model, split, prompts, cap, task_name) for split in SPLITS}
    return ({split: by_operator(mistake_counts(d)) for split, d in done.items()},
            {split: column_counts(d) for split, d in done.items()})


def summed(results: list[dict], label: str, model: str, split: str) -> dict[str, dict[str, int]]:
    """A cell's counts for one peer and split, summed over seeds."""
    out = {op: dict.fromkeys(KINDS, 0) for op in ("+", "-")}
    for res in results:
        if res["label"] == label and model in res["peers"]:
            for op, kinds in res["peers"][model][split].items():
                for kind, n in kinds.items():
                    out[op][kind] += n
    return out


def summed_columns(results: list[dict], label: str, model: str, split: str) -> dict:
    """A cell's column_counts for one peer and split, summed over seeds."""
    out: dict = {op: {"carry": {}, "no carry": {}} for op in ("+", "-")}
    for res in results:
        if res["label"] == label and model in res.get("columns", {}):
            for op, by_carry in res["columns"][model][split].items():
                for carry, by_column in by_carry.items():
                    for column, (reached, right) in by_column.items():
                        cell = out[op][carry].setdefault(column, [0, 0])
                        cell[0] += reached
                        cell[1] += right
    return out


CARRY_COLUMNS = ("1", "2", "3", "4", "5")  # (the units column never takes a carry in; "5" is a 6th column)


def column_table(rows: list[tuple[str, str, str, dict]]) -> str:
    """Markdown: per (model, what, split, operator), right steps / steps reached at each carrying column."""
    head = ("| model | weights | split | operator | " + " | ".join(f"column {int(c) + 1}" for c in CARRY_COLUMNS)
            + " | no carry in, columns 2-6 |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for model, what, split, counts in rows:
        for op, by_carry in counts.items():
            plain = [by_carry["no carry"].get(column, (0, 0)) for column in CARRY_COLUMNS]
            cells = []
            for reached, right in [*(by_carry["carry"].get(column, (0, 0)) for column in CARRY_COLUMNS),
                                   (sum(r for r, _ in plain), sum(k for _, k in plain))]:
                cells.append(f"{right}/{reached} = {right / reached:.2f}" if reached else "-")
            lines.append(f"| {model} | {what} | {'ID' if split == 'train' else 'OOD'} | {op} | {' | '.join(cells)} |")
    return "\n".join(lines)


def table(rows: list[tuple[str, str, str, dict]]) -> str:
    """Markdown: one row per (model, what, split, operator), counts of each kind."""
    return "\n".join([table_head("model | weights"),
                      *(line for model, what, split, counts in rows
                        for line in table_rows(f"{model} | {what}", split, counts))])


def main() -> None:
    from bench.experiments.grid import PAIR_SETTINGS, VERDICT_PAIRS, verdict_plan
    from bench.experiments.runs import source_commit
    from node.system.process import die_with_parent

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pair", default="long", choices=tuple(VERDICT_PAIRS))
    parser.add_argument("--cells", default="Alone,verified-imitation", help="the verdict's cell labels")
    parser.add_argument("--seeds", type=int, default=2, help="seeds 0 .. N-1 (the page's seeds)")
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--prompts", type=int, default=256, help="held-out prompts per split")
    parser.add_argument("--workers", type=int, default=2, help="runs at once (one core each)")
    parser.add_argument("--out", default="", help="write the counts here (JSON)")
    args = parser.parse_args()
    labels = tuple(args.cells.split(","))
    runs = verdict_plan(args.seeds, args.steps, args.steps, pairs=(args.pair,), secondary_seeds=args.seeds,
                        labels=labels)
    task_name = dict(PAIR_SETTINGS.get(args.pair, ())).get("task.name", "digits")
    print(f"{len(runs)} runs of the {args.pair} pair ({', '.join(labels)}; {args.seeds} seeds, {args.steps} steps), "
          f"{args.workers} at a time", flush=True)
    ctx = multiprocessing.get_context("spawn")
    results = []
    with concurrent.futures.ProcessPoolExecutor(args.workers, mp_context=ctx, initializer=die_with_parent,
                                                initargs=(os.getpid(),)) as pool:
        futures = {pool.submit(train_and_classify, run, args.prompts): run for run in runs}
        for fut in concurrent.futures.as_completed(futures):
            results.append(fut.result())
            print(f"  {len(results)}/{len(runs)} done: {futures[fut].key}", flush=True)
    rows, column_rows = [], []
    for model in VERDICT_PAIRS[args.pair]:
        start_counts, start_columns = before_training(model, task_name, args.prompts)
        for split in SPLITS:
            rows.append((model, "before training", split, start_counts[split]))
            column_rows.append((model, "before training", split, start_columns[split]))
            for label in labels:
                rows.append((model, f"{label}, {args.seeds} seeds", split, summed(results, label, model, split)))
                column_rows.append((model, f"{label}, {args.seeds} seeds", split,
                                    summed_columns(results, label, model, split)))
    print(table(rows))
    print("\nSteps right at columns that take a carry / borrow in, reached with every step before them right:")
    print(column_table(column_rows))
    if args.out:
        command = " ".join(["python -m bench.experiments.trained_errors", *sys.argv[1:]])
        Path(args.out).write_text(json.dumps({"pair": args.pair, "task": task_name, "steps": args.steps,
                                              "prompts": args.prompts, "commit": source_commit(), "command": command,
                                              "runs": results}, indent=1))


if __name__ == "__main__":
    main()
