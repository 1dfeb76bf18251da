"""The learner's padding on real completion lengths: micro-batches taken shortest row first (the node's way)
against the same budget in row order (the node's way before 2026-12-07).

A micro-batch pads every row to its longest, so where one completion of a group runs long (the stragglers of
long worked answers) a piece cut in row order pads its short neighbours to that length. Reads the raw lengths
that `bench.experiments.group_lengths --out` wrote, forms the batches a step would (`--per-step` groups of G), and
prints per file: the real tokens, the padded tokens and pieces in each order, and their ratio (padded tokens are
what a forward/backward pass costs). Exact counts, no timing.

    python -m bench.perf.padding docs/results/straggler/lengths_smollm2-135m_arith-work-add.json:2340 \
        docs/results/straggler/lengths_gemma3-270m_arith-work-add.json:847 [--prompt-tokens 40] [--per-step 4]

Each FILE:BUDGET pairs a lengths file with a token budget (the automatic one a learner prints, or yours).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from node.rl.batching import micro_batches


def padded(widths: list[int], budget: int, shortest_first: bool) -> tuple[int, int]:
    """(padded tokens, pieces) of one batch's micro-batches."""
    pieces = micro_batches(widths, budget, shortest_first)
    return sum(len(p) * max(widths[i] for i in p) for p in pieces), len(pieces)


def count(groups: list[list[int]], budget: int, prompt: int, per_step: int) -> dict:
    """Totals over the steps the groups make (`per_step` groups a batch, each row prompt + completion)."""
    totals = {"real": 0, "row_order": 0, "row_pieces": 0, "shortest": 0, "shortest_pieces": 0}
    for start in range(0, len(groups), per_step):
        widths = [prompt + n for group in groups[start:start + per_step] for n in group]
        totals["real"] += sum(widths)
        for tokens_key, pieces_key, first in (("row_order", "row_pieces", False),
                                              ("shortest", "shortest_pieces", True)):
            tokens, pieces = padded(widths, budget, first)
            totals[tokens_key] += tokens
            totals[pieces_key] += pieces
    return totals


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", metavar="FILE:BUDGET")
    parser.add_argument("--prompt-tokens", type=int, default=40, help="tokens of each row's prompt")
    parser.add_argument("--per-step", type=int, default=4, help="groups a learner batch")
    args = parser.parse_args(argv)
    print("| lengths | budget | real tokens | row order: padded (pieces) | shortest first: padded (pieces) "
          "| ratio | padding share: row order / shortest first |")
    print("|---|---|---|---|---|---|---|")
    for spec in args.files:
        path, _, budget = spec.rpartition(":")
        data = json.loads(Path(path).read_text())
        t = count(data["groups"], int(budget), args.prompt_tokens, args.per_step)
        print(f"| {data['model']} on {data['task']} ({len(data['groups'])} groups) | {budget} | {t['real']} | "
              f"{t['row_order']} ({t['row_pieces']}) | {t['shortest']} ({t['shortest_pieces']}) | "
              f"{t['shortest'] / t['row_order']:.2f} | {1 - t['real'] / t['row_order']:.2f} / "
              f"{1 - t['real'] / t['shortest']:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
