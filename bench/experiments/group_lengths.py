"""Within-group completion lengths of a model on a task, measured before any group-control result: the lengths
straggler-aware group control (SAGC) has to act on, and what it would choose on them.

Samples `--group` completions (G = 16 by default) of `--prompts` training prompts with the node's own generation
backend, `--per-step` prompts a batch as a step does, and prints:
- lengths: mean, share cut at the completion cap (the tail a cap hides), the verifier's reward;
- per group: coefficient of variation and max / median (median and 90th percentile over groups);
- by group size (the first G completions of each group: samples are independent), the straggler rate at each
  tau, each group's padding utilisation (mean / max length) and its decode cost G x max;
- SAGC run offline over the recorded groups for each (tau, delta), every step drawing `--per-step` groups:
  how often it picks each size, its straggler rate and its decode cost against fixed G = 16.

The raw lengths go to `--out` (JSON) so that every figure can be recomputed.

    python -m bench.experiments.group_lengths --model check-add --task digits-check [--prompts 128]
    python -m bench.experiments.group_lengths --model smollm2-135m --task gym:basic_arithmetic --max-new-tokens 384
"""
from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import time
from pathlib import Path

SIZES = (4, 8, 12, 16)


def group_stats(lengths: list[int]) -> dict:
    """A group's spread: coefficient of variation (population) and max / median (median floored at 1)."""
    mean = statistics.mean(lengths)
    return {"cv": statistics.pstdev(lengths) / mean if mean else 0.0,
            "max_median": max(lengths) / max(statistics.median(lengths), 1)}


def percentile(values, share: float):
    """The value below which `share` of `values` lie (the sorted values' entry at that share, the last at most)."""
    ordered = sorted(values)
    return ordered[min(int(share * len(ordered)), len(ordered) - 1)]


def by_size(groups: list[list[int]], size: int, taus: tuple[float, ...]) -> dict:
    """The first `size` completions of every group: straggler rate per tau, median utilisation, decode cost."""
    from node.sagc.controller import straggles

    parts = [g[:size] for g in groups if len(g) >= size]
    rates = {tau: statistics.mean(straggles(max(p), statistics.median(p), tau) for p in parts) for tau in taus}
    return {"groups": len(parts), "straggler": rates,
            "utilisation": statistics.median(statistics.mean(p) / max(p) for p in parts),
            "cost": statistics.mean(size * max(p) for p in parts), "tokens": statistics.mean(sum(p) for p in parts)}


def offline_sagc(groups: list[list[int]], tau: float, delta: float, steps: int, per_step: int,
                 seed: int = 0) -> dict:
    """SAGC (the node's own controller, default settings but tau and delta) over recorded groups: each step it
    picks G, takes `per_step` groups drawn at random and their first G lengths. Returns the share of steps at
    each size, the straggler rate and the decode cost (sum of G x max) relative to G = 16 on the same draws."""
    from node.config import SAGCConfig
    from node.sagc.policy import SAGCGroups
    from protocol.codec import LengthSummary

    policy = SAGCGroups(SAGCConfig(tau=tau, delta=delta, seed=seed))
    rng = random.Random(seed)
    chosen, straggled, cost, cost16 = [], [], 0.0, 0.0
    for step in range(steps):
        size = policy.choose()
        drawn = [rng.choice(groups) for _ in range(per_step)]
        own = [LengthSummary(group_size=size, max_len=max(g[:size]), median_len=float(statistics.median(g[:size])),
                             mean_len=statistics.mean(g[:size]), total_tokens=sum(g[:size]), gen_seconds=0.0,
                             family="", step=step) for g in drawn]
        metrics = policy.after_step(own, {}, "")
        chosen.append(size)
        straggled.append(metrics.straggler_rate)
        cost += sum(size * max(g[:size]) for g in drawn)
        cost16 += sum(16 * max(g[:16]) for g in drawn)
    return {"share": {g: chosen.count(g) / steps for g in SIZES}, "straggler": statistics.mean(straggled),
            "log2g": statistics.mean(math.log2(size) for size in chosen),
            "cost_vs_16": cost / cost16}


def sample(model: str, task_name: str, prompts: int, group: int, per_step: int, cap: int, temperature: float,
           backend: str, seed: int) -> dict:
    """G completions of `prompts` training prompts: each group's lengths, finish reasons and rewards, and the
    batches' generation seconds and decode slots."""
    from node.config import build_config, with_completion_cap
    from node.generation import make_backend
    from node.generation.rollouts import Group, score_group
    from node.models.loading import encode_prompt, load_model
    from node.tasks import completion_cap, get_task

    task = get_task(task_name)
    cfg = build_config({"model": {"name": model}, "task": {"name": task_name},
                        "generation": {"max_new_tokens": cap, "temperature": temperature, "backend": backend}})
    cfg = with_completion_cap(cfg, completion_cap(task))
    loaded = load_model(cfg.model, seed)
    gen = make_backend(cfg.generation, loaded, seed=seed)
    rng = random.Random(seed)
    items = [task.item("train", rng.randrange(2**31)) for _ in range(prompts)]
    out = {"groups": [], "finished": [], "rewards": [], "seconds": [], "slots": [],
           "cap": cfg.generation.max_new_tokens}
    try:
        for start in range(0, prompts, per_step):
            batch = items[start:start + per_step]
            ids = [encode_prompt(loaded.tokenizer, item) for item in batch]
            completions, seconds = gen.generate(ids, group, seed=seed * 100003 + start)
            groups = [Group(item, p, c, seconds) for item, p, c in zip(batch, ids, completions, strict=True)]
            for g in groups:
                score_group(task, g)
                out["groups"].append(g.lengths)
                out["finished"].append([c.finish_reason == "stop" for c in g.completions])
                out["rewards"].append(g.rewards)
            out["seconds"].append(seconds)
            out["slots"].append(gen.decode_slots(groups))
            print(f"  {min(start + per_step, prompts)}/{prompts} prompts, {seconds:.1f} s", flush=True)
    finally:
        gen.close()
    return out


def report(data: dict, taus: tuple[float, ...], deltas: tuple[float, ...], steps: int, per_step: int) -> list[str]:
    groups = data["groups"]
    flat = [n for g in groups for n in g]
    cut = 1 - statistics.mean(f for g in data["finished"] for f in g)
    spread = [group_stats(g) for g in groups]
    q = percentile
    lines = [f"{len(groups)} groups of {len(groups[0])}: mean length {statistics.mean(flat):.1f} tokens, median "
             f"{statistics.median(flat):.0f}, 99th percentile {q(flat, 0.99)}, longest {max(flat)} (cap {data['cap']});"
             f" cut at the cap {cut:.3f}; reward {statistics.mean(r for g in data['rewards'] for r in g):.3f}",
             f"per group: CV median {statistics.median(s['cv'] for s in spread):.2f}, 90th pct "
             f"{q([s['cv'] for s in spread], 0.9):.2f}; max/median median "
             f"{statistics.median(s['max_median'] for s in spread):.2f}, 90th pct "
             f"{q([s['max_median'] for s in spread], 0.9):.2f}, largest {max(s['max_median'] for s in spread):.2f}",
             f"generation: {statistics.median(data['seconds']):.2f} s a batch of {per_step} groups (median), "
             f"utilisation of the decode slots {sum(flat) / sum(data['slots']):.2f}", "",
             "| G | " + " | ".join(f"straggler rate, tau {t:g}" for t in taus)
             + " | group utilisation (median) | decode cost G x max | / G=16 |",
             "|---|" + "---|" * len(taus) + "---|---|---|"]
    rows = {size: by_size(groups, size, taus) for size in SIZES if size <= len(groups[0])}
    top = rows[max(rows)]["cost"]
    for size, r in rows.items():
        lines.append(f"| {size} | " + " | ".join(f"{r['straggler'][t]:.3f}" for t in taus)
                     + f" | {r['utilisation']:.2f} | {r['cost']:.0f} | {r['cost'] / top:.2f} |")
    lines += ["", f"SAGC offline ({steps} steps of {per_step} groups drawn from these; the node's controller, "
              "its defaults but tau and delta)", "",
              "| tau | delta | steps at G=4 / 8 / 12 / 16 | straggler rate | decode cost / G=16 |",
              "|---|---|---|---|---|"]
    for tau in taus:
        for delta in deltas:
            s = offline_sagc(groups, tau, delta, steps, per_step)
            lines.append(f"| {tau:g} | {delta:g} | " + " / ".join(f"{s['share'][g]:.2f}" for g in SIZES)
                         + f" | {s['straggler']:.3f} | {s['cost_vs_16']:.2f} |")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="check-add")
    parser.add_argument("--task", default="digits-check")
    parser.add_argument("--prompts", type=int, default=128)
    parser.add_argument("--group", type=int, default=16)
    parser.add_argument("--per-step", type=int, default=8, help="prompts a generation batch, as a step has")
    parser.add_argument("--max-new-tokens", type=int, default=0, help="completion cap (0: the task's)")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--backend", default="transformers", choices=["transformers", "vllm"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--taus", default="1.5,2,3")
    parser.add_argument("--deltas", default="0.2,0.3,0.5")
    parser.add_argument("--sagc-steps", type=int, default=300)
    parser.add_argument("--out", default="", help="write the raw lengths here (JSON)")
    parser.add_argument("--from", dest="source", default="", help="report on a raw file written before")
    args = parser.parse_args(argv)
    import torch

    from node.system.runtime import quiet_libraries

    quiet_libraries()
    torch.set_num_threads(1)
    if args.source:
        data = json.loads(Path(args.source).read_text())
    else:
        start = time.perf_counter()
        data = sample(args.model, args.task, args.prompts, args.group, args.per_step, args.max_new_tokens,
                      args.temperature, args.backend, args.seed)
        data.update(model=args.model, task=args.task, temperature=args.temperature, backend=args.backend,
                    seconds_in_all=time.perf_counter() - start)
        if args.out:
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text(json.dumps(data))
    taus = tuple(float(t) for t in args.taus.split(","))
    deltas = tuple(float(d) for d in args.deltas.split(","))
    print(f"\n{data['model']} on {data['task']}, temperature {data['temperature']:g}, {data['backend']} backend")
    print("\n".join(report(data, taus, deltas, args.sagc_steps, args.per_step)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
