"""The importance weights a receiver gives a sender's completions: what F-TIS acts through.

For each (receiver, sender) pair of zoo models with one tokenizer: the sender samples G completions of N training
prompts (its own generation backend, so its behaviour log-probs are what it would share), the receiver's
verifier scores them, and the receiver's log-probs of the same tokens give every token's ratio
w = pi_receiver / pi_sender, before F-TIS truncates it at C = 2. Printed per pair:
- median w and the share of tokens with w < 0.1, over all received tokens; over right completions; and over
  right completions of prompts whose greedy answer the receiver gets wrong (where the sender's skill is, and
  what an update on them would teach);
- the per-row weight exp(mean log-ratio) there (F-TIS-seq's; HACPO's sequence ratio before its clip);
- the F- filter: D = sum over a row of log pi_sender - log pi_receiver, its median, and the share of rows the
  paper's filter drops (A <= 0 and D >= 50) and the seed summary's reading drops (A <= 0).

    python -m bench.experiments.weights [--pairs part-sub:part-add@digits,...] [--prompts 64] [--group 8]
"""
from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import time
from pathlib import Path

PAIRS = ("digit-sub-bpe:digit-add-bpe@digits", "digit-add-bpe:digit-sub-bpe@digits",  # complementary: a trace
         "part-sub:part-add@digits", "part-add:part-sub@digits",  # plausible: a quarter of the other's skill
         "check-sub:check-add@digits-check", "check-add:check-sub@digits-check")  # the long-completion pair
LOW = 0.1  # a token "barely counts" below this weight
G_FILTER = 50.0  # the paper's g


def parse_pair(text: str) -> tuple[str, str, str]:
    """"receiver:sender@task" -> (receiver, sender, task)."""
    models, _, task = text.partition("@")
    receiver, _, sender = models.partition(":")
    if not (receiver and sender and task):
        raise ValueError(f"a pair is receiver:sender@task, not {text!r}")
    return receiver, sender, task


def quantiles(values: list[float]) -> dict:
    """Median, 10th percentile and the share below LOW of a list of weights (nan when empty)."""
    if not values:
        return {"n": 0, "median": math.nan, "p10": math.nan, "low": math.nan}
    from bench.experiments.group_lengths import percentile

    return {"n": len(values), "median": statistics.median(values), "p10": percentile(values, 0.1),
            "low": sum(v < LOW for v in values) / len(values)}


def measure(receiver: str, sender: str, task_name: str, prompts: int, group: int, seed: int) -> dict:
    """Token weights, row weights and divergences of `sender`'s groups under `receiver`."""
    import torch

    from node.config import GenerationConfig, ModelConfig
    from node.generation import make_backend
    from node.generation.rollouts import Group, Received, score_group
    from node.models.loading import encode_prompt, load_model
    from node.rl.batching import build_batch
    from node.rl.learner import sequence_logprobs
    from node.rl.transfer.base import group_advantages
    from node.tasks import completion_cap, get_task

    task = get_task(task_name)
    sampling = GenerationConfig(max_new_tokens=completion_cap(task))
    models = {name: load_model(ModelConfig(name=name), seed) for name in (receiver, sender)}
    if models[receiver].tokenizer.get_vocab() != models[sender].tokenizer.get_vocab():
        raise ValueError(f"{receiver} and {sender} do not share a tokenizer: token weights need one")
    backends = {name: make_backend(sampling, loaded, seed) for name, loaded in models.items()}
    rng = random.Random(seed)
    items = [task.item("train", rng.randrange(2**31)) for _ in range(prompts)]
    ids = [encode_prompt(models[sender].tokenizer, item) for item in items]
    outputs, _ = backends[sender].generate(ids, group, seed=seed)
    groups = [Group(item, p, c) for item, p, c in zip(items, ids, outputs, strict=True)]
    for g in groups:
        score_group(task, g)
    greedy, _ = backends[receiver].generate(ids, 1, seed=seed, greedy=True)
    fails = [task.score(item, out[0].text, out[0].finish_reason == "stop") < 1
             for item, out in zip(items, greedy, strict=True)]
    received = [Received(g) for g in groups]
    batch = build_batch([], received, backends[receiver].pad_id,
                        lambda rewards, _: group_advantages(rewards, 1e-6), drop_flat=False)
    model = models[receiver].model
    model.eval()
    with torch.no_grad():
        logp = sequence_logprobs(model, batch, temperature=sampling.temperature)
    log_ratio = (logp - batch.logp_gen).masked_fill(~batch.mask, 0.0)
    rows = [(fails[k], c) for k, g in enumerate(groups) for c in g.completions if c.token_ids]
    tokens: dict[str, list[float]] = {"all": [], "right": [], "skill": []}
    row_weight: dict[str, list[float]] = {"all": [], "right": [], "skill": []}
    divergence, dropped_and, dropped_or = [], 0, 0
    for i, (receiver_fails, c) in enumerate(rows):
        n = int(batch.mask[i].sum())
        lr = log_ratio[i, :n]
        w = lr.clamp(max=20).exp().tolist()
        kinds = ["all"] + (["right", *(["skill"] if receiver_fails else [])] if c.reward >= 1 else [])
        for kind in kinds:
            tokens[kind] += w
            row_weight[kind].append(math.exp(float(lr.mean())))
        d = -float(lr.sum())
        divergence.append(d)
        a = float(batch.advantages[i])
        dropped_and += a <= 0 and d >= G_FILTER
        dropped_or += a <= 0
    for b in backends.values():
        b.close()
    return {"receiver": receiver, "sender": sender, "task": task_name, "rows": len(rows),
            "sender_reward": statistics.mean(c.reward for g in groups for c in g.completions),
            "receiver_greedy_fails": statistics.mean(fails),
            "tokens": {k: quantiles(v) for k, v in tokens.items()},
            "rows_weight": {k: quantiles(v) for k, v in row_weight.items()},
            "d_median": statistics.median(divergence), "filter_and": dropped_and / len(rows),
            "filter_or": dropped_or / len(rows)}


def table(results: list[dict]) -> list[str]:
    def cell(q: dict) -> str:
        return "-" if not q["n"] else f"{q['median']:.3g} / {q['p10']:.2g} / {q['low']:.2f}"

    lines = ["| receiver <- sender (task) | sender's reward | receiver's greedy wrong | token w: median / 10th pct / "
             "share < 0.1, all | right rows | right rows where receiver fails (n tokens) | row weight there | "
             "D median (nats) | filter drops: paper (A <= 0 and D >= 50) / summary (A <= 0) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        t = r["tokens"]
        lines.append(f"| {r['receiver']} <- {r['sender']} ({r['task']}) | {r['sender_reward']:.3f} | "
                     f"{r['receiver_greedy_fails']:.3f} | {cell(t['all'])} | {cell(t['right'])} | "
                     f"{cell(t['skill'])} ({t['skill']['n']}) | {cell(r['rows_weight']['skill'])} | "
                     f"{r['d_median']:.1f} | {r['filter_and']:.3f} / {r['filter_or']:.3f} |")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", default=",".join(PAIRS), help="receiver:sender@task, comma-separated")
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="", help="write the results here (JSON)")
    args = parser.parse_args(argv)
    import torch

    from node.system.runtime import quiet_libraries

    quiet_libraries()
    torch.set_num_threads(1)
    results = []
    for text in args.pairs.split(","):
        start = time.perf_counter()
        results.append(measure(*parse_pair(text), args.prompts, args.group, args.seed))
        print(f"  {text}: {time.perf_counter() - start:.0f} s", flush=True)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(results, indent=1))
    print(f"\n{args.prompts} prompts x G = {args.group}, temperature 1, seed {args.seed}; w = pi_receiver / pi_sender "
          "per token, before truncation")
    print("\n".join(table(results)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
