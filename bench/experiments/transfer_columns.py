"""Where does a partner's skill transfer? Held-out greedy accuracy by operator and number of columns, after
training in the swarm (verified-imitation, the node's default on digits) and alone with twice the prompts (Alone-2x).

docs/RESULTS.md's verdict reports each peer's accuracy per operator; this says, per number of columns (one carry
or borrow decision more with each), how far a peer that lacked an operator's skill gets with its partner's right
workings and without them, so that a ceiling on the partner's operator can be read off as "short problems
learnt, long ones not" or otherwise. One seed; the cells are the results page's own (same configuration, seeds and
prompts as the page's runs of that seed).

    python -m bench.experiments.transfer_columns [--steps 150] [--seed 0] [--prompts 768] [--workers 2] [--out FILE]
"""
from __future__ import annotations

import argparse
import collections
import concurrent.futures
import json
import multiprocessing
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CELLS = ("Alone-2x", "verified-imitation")  # the bigger-batch control and the node's default transfer


def by_columns(peer, prompts: int) -> dict[str, list[float]]:
    """{"+3": [scores], ...}: greedy verifier scores of held-out items (both splits) by operator and columns."""
    from node.evaluation import _complete, held_out_items, item_scores
    from node.models.loading import encode_prompt
    from node.tasks.digits import parse_prompt

    out = collections.defaultdict(list)
    for split in ("train", "test"):
        items = held_out_items(peer.task, split, prompts)
        groups = _complete(peer.backend, [encode_prompt(peer.loaded.tokenizer, i) for i in items], 1, True, 256)
        for item, score in zip(items, item_scores(peer.task, items, groups), strict=True):
            a, op, _ = parse_prompt(item.prompt)
            out[f"{op}{len(str(a))}"].append(score)
    return dict(out)


def run_cell(label: str, models: tuple[str, ...], steps: int, seed: int, prompts: int) -> dict:
    """Trains one cell of the results page (one peer alone, or the pair sharing); each model's scores before
    and after."""
    import torch

    from bench.experiments.grid import VERDICT_CELLS, Run
    from bench.experiments.runner import run_peers
    from node.system.runtime import quiet_libraries

    quiet_libraries()
    torch.set_num_threads(1)
    _, policy, settings = next(c for c in VERDICT_CELLS if c[0] == label)
    _, peers = run_peers(Run("verdict", models, policy, seed, steps, steps, settings, label), {})
    try:
        start = {m: by_columns(p, prompts) for m, p in zip(models, peers, strict=True)}
        for step in range(steps):
            for peer in peers:
                peer.step(step)
        return {m: {"cell": label, "start": start[m], "end": by_columns(p, prompts)}
                for m, p in zip(models, peers, strict=True)}
    finally:
        for peer in peers:
            peer.close()


def table(results: list[dict], pair: tuple[str, str]) -> list[str]:
    """Markdown: per model and operator, accuracy by columns at step 0 and after each cell."""
    columns = sorted({int(k[1:]) for r in results for m in r.values() for k in m["end"]})
    lines = ["| model | operator | cell | " + " | ".join(f"{c} col" for c in columns) + " |",
             "|---" * (3 + len(columns)) + "|"]
    for model in pair:
        for op, name in (("+", "sum"), ("-", "difference")):
            rows = [("step 0", next(r[model]["start"] for r in results if model in r))]
            rows += [(r[model]["cell"], r[model]["end"]) for r in results if model in r]
            for cell, scores in rows:
                cells = [scores.get(f"{op}{c}") for c in columns]
                figures = [f"{statistics.mean(v):.2f} ({len(v)})" if v else "-" for v in cells]
                lines.append(f"| {model} | {name} | {cell} | " + " | ".join(figures) + " |")
    return lines


def main(argv=None) -> int:
    from bench.experiments.grid import VERDICT_PAIRS

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pair", default="complementary", choices=sorted(VERDICT_PAIRS))
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--prompts", type=int, default=768, help="held-out prompts per split")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", default="", help="also write the scores as JSON here")
    args = parser.parse_args(argv)
    pair = VERDICT_PAIRS[args.pair]
    jobs = [("verified-imitation", pair)] + [("Alone-2x", (m,)) for m in pair]
    print(f"{len(jobs)} runs of {args.steps} steps, {args.workers} at a time (about 3 minutes each for 150 steps "
          f"on this CPU), then {args.prompts} held-out prompts per split by columns", flush=True)
    start, results = time.perf_counter(), []
    ctx = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(args.workers, mp_context=ctx) as pool:
        futures = {pool.submit(run_cell, label, models, args.steps, args.seed, args.prompts): label
                   for label, models in jobs}
        for done in concurrent.futures.as_completed(futures):
            results.append(done.result())
            print(f"  {futures[done]} done ({len(results)}/{len(jobs)}, {time.perf_counter() - start:.0f} s)",
                  flush=True)
    results.sort(key=lambda r: CELLS.index(next(iter(r.values()))["cell"]))
    print(f"\nGreedy pass@1 by columns (held-out, {args.prompts} prompts per split; 6 columns = out of "
          f"distribution), {args.steps} steps, seed {args.seed}; in brackets: prompts")
    print("\n".join(table(results, pair)))
    if args.out:
        Path(args.out).write_text(json.dumps({"args": vars(args), "results": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
