"""Memory: the learner's peak with and without micro-batching, and a long run's resident memory over time.

1. Learner peak (a fresh process per measurement): a model is loaded, the peak-RSS mark is reset
   (/proc/self/clear_refs), one learner step runs on a batch of R completions (own groups of 4, synthetic token
   ids: prompt 32 + completion C tokens), and the peak above the loaded model is reported. Whole batch in one
   pass vs micro-batches of --budget padded tokens (gradient accumulation, same gradient).
2. Long run: `swarm run` of many fast steps (tiny-add, checkpoints on), its RSS sampled while it runs; flat
   means no per-step state that grows.

    python -m bench.perf.memory [--model smollm2-135m] [--rows 8,16,32,64] [--completion 64] [--budget 2048]
                                 [--long-steps 4000]
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from node.system.process import rss_mb

ROOT = Path(__file__).resolve().parents[2]


def child(args) -> None:
    """One measurement: prints {"load": MiB, "peak": MiB above load, "seconds": step time}."""
    import random

    import torch

    from node.config import LossConfig, ModelConfig, TrainConfig
    from node.generation.rollouts import Completion, Group
    from node.models.loading import load_model
    from node.rl.learner import Learner
    from node.system.runtime import quiet_libraries
    from node.tasks import get_task

    quiet_libraries()
    torch.set_num_threads(args.threads)
    loaded = load_model(ModelConfig(name=args.model))
    vocab = loaded.model.config.vocab_size
    rng = random.Random(0)
    item = get_task("arith-add").item("train", 0)
    groups = []
    for _ in range(int(args.rows) // 4):
        prompt = [rng.randrange(3, vocab) for _ in range(32)]
        comps = [Completion([rng.randrange(3, vocab) for _ in range(args.completion)], [-2.0] * args.completion,
                            "length", "", float(i % 2)) for i in range(4)]
        groups.append(Group(item, prompt, comps))
    from node.config import TransferConfig
    from node.rl.transfer.registry import build_policy

    learner = Learner(loaded.model, loaded.tokenizer.pad_token_id, TrainConfig(micro_batch_tokens=args.budget),
                      LossConfig(), build_policy(TransferConfig("f-tis"), checks_work=False), temperature=1.0,
                      lr=1e-6)
    load = rss_mb("self")
    Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM: the peak from here on
    start = time.perf_counter()
    learner.step(groups)
    seconds = time.perf_counter() - start
    print(json.dumps({"load": load, "peak": rss_mb("self", field="VmHWM") - load, "seconds": seconds}))


def measure(args, rows: int, budget: int) -> dict:
    cmd = [sys.executable, __file__, "--child", "--model", args.model, "--rows", str(rows), "--completion",
           str(args.completion), "--budget", str(budget), "--threads", str(args.threads)]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, check=True, timeout=3600)
    return json.loads(out.stdout.strip().splitlines()[-1])


def learner_table(args) -> None:
    rows_list = [int(r) for r in args.rows.split(",")]
    width = 32 + args.completion
    print(f"## Learner peak memory: {args.model}, rows of {width} tokens (prompt 32 + completion "
          f"{args.completion}), micro-batch budget {args.budget} padded tokens")
    print("| rows | batch tokens | whole batch: peak above model | micro-batched: peak | ratio | "
          "step s whole / micro |")
    print("|---|---|---|---|---|---|")
    for rows in rows_list:
        whole, micro = measure(args, rows, 0), measure(args, rows, args.budget)
        print(f"| {rows} | {rows * width} | {whole['peak']:.0f} MiB | {micro['peak']:.0f} MiB | "
              f"{micro['peak'] / max(whole['peak'], 1e-9):.2f} | {whole['seconds']:.1f} / {micro['seconds']:.1f} |",
              flush=True)
    print(f"(model loaded: {whole['load']:.0f} MiB resident)")


def long_run(args) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        metrics = Path(tmp) / "m.jsonl"
        cmd = [sys.executable, str(ROOT / "swarm_cli.py"), "run", "--model", "tiny-add", "--steps",
               str(args.long_steps), "--prompts", "2", "--group-policy", "fixed", "--group-size", "2",
               "--out", str(Path(tmp) / "out"), "--metrics", str(metrics), "--checkpoint-every", "1000",
               "--log-every", "1000000"]
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        samples = []  # (steps done, RSS MiB)
        while proc.poll() is None:
            try:
                rss = rss_mb(proc.pid)
                done = metrics.read_bytes().count(b"\n") if metrics.exists() else 0
            except (FileNotFoundError, ProcessLookupError, IndexError):  # the process has ended
                break
            samples.append((done, rss))
            time.sleep(0.5)
        proc.wait()
    print(f"\n## Long run: `swarm run` tiny-add, {args.long_steps} steps (2 prompts x 2), checkpoints every 1000")
    print("| steps done | RSS |")
    print("|---|---|")
    training = [(d, r) for d, r in samples if 0 < d < args.long_steps]  # not start-up, not the final save
    for frac in (0.05, 0.25, 0.5, 0.75, 0.98):
        target = frac * args.long_steps
        near = [rss for done, rss in training if abs(done - target) <= args.long_steps * 0.02]
        if near:
            print(f"| ~{int(target)} | {statistics.median(near):.1f} MiB |")
    late = [(d, r) for d, r in training if d >= args.long_steps * 0.25]
    if len(late) > 2:
        slope = statistics.linear_regression([d for d, _ in late], [r for _, r in late]).slope
        print(f"RSS slope while training, from 25% of the steps on: {slope * 1000:+.3f} MiB per 1000 steps "
              f"({len(late)} samples); peak {max(r for _, r in samples):.1f} MiB (the end: saving, plotting)")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--rows", default="8,16,32,64")
    parser.add_argument("--completion", type=int, default=64)
    parser.add_argument("--budget", type=int, default=2048)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--long-steps", type=int, default=4000)
    parser.add_argument("--skip-learner", action="store_true")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args)
        return
    if not args.skip_learner:
        learner_table(args)
    if args.long_steps:
        long_run(args)


if __name__ == "__main__":
    main()
