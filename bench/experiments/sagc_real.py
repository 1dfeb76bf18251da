"""SAGC vs fixed group sizes for real: one peer training the zoo's tiny-count model on the count task.

Counting has a heavy completion-length tail (the pre-trained model often runs on past the end), so large
groups straggle. Every policy runs the same number of steps from the same weights and seed, in one process;
reported per policy (median over seeds): wall clock and its ratio to fixed G=16, straggler rate (overall,
second half), padding utilisation (useful / decode-slot tokens: one padded batch per step with the
transformers backend, none with vLLM) and final reward (last 20% of steps). The best fixed size is the largest
whose straggler rates stay within delta + 0.05.

    python -m bench.experiments.sagc_real [--steps 80] [--seeds 2] [--prompts 16] [--backend transformers|vllm]
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from node.config import build_config
from node.peer import Peer
from node.system.runtime import quiet_libraries

FIXED = (4, 8, 12, 16)


def run(policy: str, steps: int, seed: int, prompts: int, batch_mode: str, backend: str) -> dict:
    train = {"steps": steps, "seed": seed, "prompts_per_step": prompts, "batch_mode": batch_mode,
             "completions_per_step": prompts * 8}
    train.update({"group_policy": "sagc"} if policy == "sagc" else {"group_policy": "fixed", "group_size": policy})
    cfg = build_config({"model": {"name": "tiny-count"}, "task": {"name": "count"}, "train": train,
                        "generation": {"max_new_tokens": 32, "backend": backend}, "sagc": {"seed": seed}})
    peer = Peer(cfg)
    try:
        start = time.perf_counter()
        results = [peer.step(s) for s in range(steps)]
        wall = time.perf_counter() - start
    finally:
        peer.close()
    rates = [r.group.straggler_rate for r in results]
    tail = max(1, steps // 5)
    return {
        "wall": wall,
        "rate": statistics.mean(rates),
        "rate2": statistics.mean(rates[steps // 2:]),
        "util": sum(r.tokens for r in results) / sum(r.padded_tokens for r in results),
        "reward": statistics.mean(r.reward for r in results[-tail:]),
        "reward0": results[0].reward,
        "log2g": statistics.mean(torch.log2(torch.tensor(float(r.group_size))).item() for r in results),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--batch-mode", default="fixed_prompts", choices=["fixed_prompts", "fixed_completions"])
    parser.add_argument("--backend", default="transformers", choices=["transformers", "vllm"],
                        help="vllm: continuous batching, no padded step batch (needs vLLM)")
    args = parser.parse_args(argv)
    quiet_libraries()
    torch.set_num_threads(1)
    delta = build_config().sagc.delta
    rows = {}
    for policy in [*map(str, FIXED), "sagc"]:
        runs = [run(policy, args.steps, seed, args.prompts, args.batch_mode, args.backend)
                for seed in range(args.seeds)]
        rows[policy] = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        rows[policy]["rewards"] = [round(r["reward"], 3) for r in runs]
        r = rows[policy]
        print(f"  done {policy:>4}: wall {r['wall']:.1f}s rate {r['rate']:.3f} reward {r['reward']:.3f}", flush=True)
    within = [p for p in map(str, FIXED) if max(rows[p]["rate"], rows[p]["rate2"]) <= delta + 0.05]
    best = within[-1] if within else "4"
    print(f"\ntiny-count on count, {args.backend} backend, {args.steps} steps x {args.prompts} prompts "
          f"({args.batch_mode}), "
          f"median of {args.seeds} seeds; best fixed size within budget: G={best}")
    print(f"{'policy':<7} {'wall s':>7} {'/G=16':>6} {f'/G={best}':>6} {'strag':>6} {'strag 2nd':>9} "
          f"{'log2 G':>6} {'util':>5} {'reward 0':>8} {'final reward':>12}  per seed")
    for name, r in rows.items():
        label = "SAGC" if name == "sagc" else f"G={name}"
        print(f"{label:<7} {r['wall']:>7.1f} {r['wall'] / rows['16']['wall']:>6.2f} "
              f"{r['wall'] / rows[best]['wall']:>6.2f} {r['rate']:>6.3f} {r['rate2']:>9.3f} {r['log2g']:>6.2f} "
              f"{r['util']:>5.2f} {r['reward0']:>8.3f} {r['reward']:>12.3f}  {r['rewards']}")
    print("\npaper (Llama-3.2-3B, DAPO): wall 0.54x of G=16; straggler rate 99.6% -> 43.4%")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
