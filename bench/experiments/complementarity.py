"""Do two zoo peers know different things? Each model's own chance of a right answer, per operator.

For every model and each operator of the column arithmetic task (node/tasks/digits.py), on held-out prompts in
distribution and out of it: greedy pass@1, sampled pass@1 (at the training temperature) and the share of
prompts where a group of G sampled completions holds at least one right answer (what a GRPO group can learn
from). A pair is complementary when each model's groups hold a right answer on less than 5% of the prompts of
the operator it lacks while its partner's do on at least 30%: the check printed at the end.

    python -m bench.experiments.complementarity [--models digit-add,digit-sub] [--prompts 256] [--group 8]
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

OPERATORS = {"+": "digits-add", "-": "digits-sub"}
LACKS, HAS = 0.05, 0.30  # the complementarity thresholds (share of prompts with a right answer in a group)


def measure(model: str, prompts: int, group: int, max_new_tokens: int) -> dict:
    """{(operator, split): (greedy, sampled, any-right share)} for one model through its own backend."""
    import torch

    from node.config import GenerationConfig, ModelConfig
    from node.evaluation import held_out_items
    from node.generation import make_backend
    from node.generation.rollouts import score_completion
    from node.models.loading import encode_prompt, load_model
    from node.tasks import get_task

    torch.set_num_threads(1)
    loaded = load_model(ModelConfig(name=model))
    backend = make_backend(GenerationConfig(max_new_tokens=max_new_tokens), loaded, seed=0)
    out = {}
    for op, task_name in OPERATORS.items():
        task = get_task(task_name)
        for split in ("train", "test"):
            items = held_out_items(task, split, prompts)
            ids = [encode_prompt(loaded.tokenizer, item) for item in items]
            greedy, sampled, any_right = [], [], []
            for start in range(0, len(items), 32):
                chunk = slice(start, start + 32)
                best, _ = backend.generate(ids[chunk], 1, seed=start, greedy=True)
                groups, _ = backend.generate(ids[chunk], group, seed=start)
                for item, g, s in zip(items[chunk], best, groups, strict=True):
                    greedy.append(score_completion(task, item, g[0]))
                    scores = [score_completion(task, item, c) for c in s]
                    sampled.append(statistics.mean(scores))
                    any_right.append(1.0 if max(scores) > 0 else 0.0)
            out[(op, split)] = (statistics.mean(greedy), statistics.mean(sampled), statistics.mean(any_right))
    return out


def complementary(a: tuple[str, dict], b: tuple[str, dict]) -> list[str]:
    """The check, both ways, on the in-distribution prompts: lines saying which operator each model lacks and
    whether its partner's groups carry it."""
    lines = []
    for (name_a, ra), (name_b, rb) in ((a, b), (b, a)):
        lacks = min(OPERATORS, key=lambda op: ra[(op, "train")][2])
        mine, theirs = ra[(lacks, "train")][2], rb[(lacks, "train")][2]
        ok = mine < LACKS and theirs >= HAS
        lines.append(f"{name_a} on '{lacks}': own groups right on {mine:.1%} of prompts (< {LACKS:.0%}?), "
                     f"{name_b}'s on {theirs:.1%} (>= {HAS:.0%}?): {'complementary' if ok else 'NOT complementary'}")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="digit-add,digit-sub")
    parser.add_argument("--prompts", type=int, default=256, help="held-out prompts per operator and split")
    parser.add_argument("--group", type=int, default=8, help="completions per prompt (G)")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    args = parser.parse_args(argv)
    from node.system.runtime import quiet_libraries

    quiet_libraries()
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    results = {}
    print(f"| model | operator | split | greedy | sampled | groups of {args.group} with a right answer |")
    print("|---|---|---|---|---|---|")
    for model in models:
        results[model] = measure(model, args.prompts, args.group, args.max_new_tokens)
        for (op, split), (greedy, sampled, any_right) in results[model].items():
            print(f"| {model} | {op} | {'ID' if split == 'train' else 'OOD'} | {greedy:.3f} | {sampled:.3f} | "
                  f"{any_right:.3f} |", flush=True)
    if len(models) == 2:
        print()
        for line in complementary(*((name, results[name]) for name in models)):
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
