"""The real-model recipe on one GPU, beside TRL's GRPOTrainer.

Ours: SmolLM2-135M-Instruct and Gemma 3 270M as the two peers of one swarm (`swarm local`: each its own process,
DHT node and vLLM engine, 0.3 of the GPU's memory each), SAGC on, a task with long worked answers. Then each
model alone under TRL's GRPOTrainer (vLLM colocated where TRL can use it, else its transformers generation) with
the same prompts a step, G = 16 (TRL has no group control), completion cap, temperature, learning rate and
verifier. Printed per trainer and model: completion tokens per second of generation (ours; TRL's is not timed
apart) and of the whole step, step seconds (median), the straggler rate (tau 2: a group whose longest completion
passes twice its median), the share cut at the cap, mean G and the reward over the first and last fifth of steps.

Each part stops at its time budget (SIGTERM to the swarm we started; TRL's loop told to stop), so the whole runs in
about 10 minutes on a GPU; the raw metrics go to --out.

    python -m bench.perf.gpu_recipe [--out bench/out/gpu_recipe] [--minutes 4]   # on a GPU
    python -m bench.perf.gpu_recipe --cpu-check     # the same code paths on the CPU: zoo models, a few steps
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from bench.swarms import run_until

ROOT = Path(__file__).resolve().parents[2]
TAU = 2.0


@dataclass(frozen=True)
class Recipe:
    models: tuple[str, ...]
    task: str
    cap: int  # completion cap in tokens (the tail must stay visible: the share cut is printed)
    temperature: float
    prompts: int  # prompts a step
    group: int  # TRL's G (ours: SAGC's largest candidate)
    steps: int  # at most, each part (the time budget stops it sooner)
    backend: str  # ours: vllm on a GPU, transformers for the CPU check


# arith-work-add: both models inside the 5-50% window (sampled reward 0.28 and 0.19 at 0.7, where
# gym:basic_arithmetic gives 0.002 and 0.055), working of mean 84 / 29 tokens with 0.8% / 4.3% cut at 384
GPU = Recipe(models=("smollm2-135m", "gemma3-270m"), task="arith-work-add", cap=384, temperature=0.7,
             prompts=8, group=16, steps=200, backend="vllm")
CPU_CHECK = Recipe(models=("check-sub", "check-add"), task="digits-check", cap=224, temperature=1.0, prompts=2,
                   group=16, steps=3, backend="transformers")


def straggler_rate(groups: list[list[int]]) -> float:
    """Share of groups whose longest completion passes TAU times its median (node/sagc's rule)."""
    from node.sagc.controller import straggles

    return statistics.mean(straggles(max(g), statistics.median(g), TAU) for g in groups) if groups else 0.0


def ends(values: list[float]) -> tuple[float, float]:
    """Means of the first and last fifth of a series."""
    tail = max(len(values) // 5, 1)
    return statistics.mean(values[:tail]), statistics.mean(values[-tail:])


# ---- ours: a swarm of the recipe's models ---------------------------------------------------------------------

def ours(recipe: Recipe, out: Path, minutes: float) -> list[dict]:
    """`swarm local` with the recipe's models, SAGC on, until `minutes` of wall clock (or its steps) are spent."""
    from node.app.local_swarm import read_metrics

    folder = out / "ours"
    folder.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, str(ROOT / "swarm_cli.py"), "local", "--models", ",".join(recipe.models),
           "--peers", str(len(recipe.models)), "--task", recipe.task, "--steps", str(recipe.steps),
           "--prompts", str(recipe.prompts), "--group-policy", "sagc", "--backend", recipe.backend,
           "--eval-every", "0", "--out", str(folder), "--set", f"generation.max_new_tokens={recipe.cap}",
           "--set", f"generation.temperature={recipe.temperature}"]
    run_until(cmd, ROOT, folder / "local.log", lambda: False, 60 * minutes)  # (stopped at the budget)
    rows = {p.stem.split("-", 1)[1]: read_metrics(p) for p in sorted(folder.glob("peer*.jsonl"))}
    if not any(rows.values()):
        raise RuntimeError(f"the swarm made no step; see {folder / 'local.log'}")
    results = []
    for model, rs in rows.items():
        rs = rs[1:] if len(rs) > 2 else rs  # (the first step waits for the other peers and warms up)
        tokens = sum(r.tokens for r in rs)
        first, last = ends([r.reward for r in rs])
        results.append({"trainer": "ours (swarm, SAGC)", "model": model, "steps": len(rs),
                        "gen_tokens_s": tokens / max(sum(r.gen_seconds for r in rs), 1e-9),
                        "step_tokens_s": tokens / max(sum(r.step_seconds for r in rs), 1e-9),
                        "step_s": statistics.median(r.step_seconds for r in rs),
                        "straggler": statistics.mean(r.group.straggler_rate for r in rs),
                        "cut": None, "mean_g": statistics.mean(r.group_size for r in rs),
                        "reward": (first, last)})
    return results


# ---- TRL's GRPOTrainer, each model alone -----------------------------------------------------------------------

class Recorder:
    """TRL reward function: the node's verifier on each completion; records each group's lengths and cuts."""

    __name__ = "node_verifier"  # (TRL names a reward function's metrics after it)

    def __init__(self, task, eos_ids: set[int]):
        self.task, self.eos_ids = task, eos_ids
        self.groups: list[list[int]] = []
        self.cut: list[bool] = []
        self.rewards: list[float] = []  # per generation batch (one a step)
        self.tokens: list[int] = []  # completion tokens per generation batch

    def __call__(self, prompts, completions, completion_ids, index, **_) -> list[float]:
        by_prompt: dict[int, list[int]] = {}
        scores = []
        for text, ids, i in zip(completions, completion_ids, index, strict=True):
            text = text[-1]["content"] if isinstance(text, list) else text  # (a chat model's message)
            finished = bool(ids) and ids[-1] in self.eos_ids
            scores.append(self.task.score(self.task.item("train", i), text, finished))
            by_prompt.setdefault(i, []).append(len(ids))
            self.cut.append(not finished)
        self.groups += list(by_prompt.values())
        self.rewards.append(statistics.mean(scores))
        self.tokens.append(sum(len(ids) for ids in completion_ids))
        return scores


def trl_run(model_name: str, recipe: Recipe, out: Path, minutes: float, seed: int = 0) -> dict:
    """One model under TRL's GRPOTrainer on the recipe's task, until `minutes` or its steps."""
    import warnings

    import torch
    from datasets import Dataset
    from transformers import PrinterCallback, ProgressCallback, TrainerCallback

    warnings.filterwarnings("ignore", message="TRL currently supports vLLM")  # (said once, in the table's name)
    from trl import GRPOConfig, GRPOTrainer

    from node.generation.rollouts import stop_ids
    from node.models.loading import load_base
    from node.models.zoo import recommended_lr
    from node.tasks import get_task

    model, tokenizer, _ = load_base(model_name)
    task = get_task(recipe.task)
    chat = bool(getattr(tokenizer, "chat_template", None))
    rows = []
    for i in range(recipe.steps * recipe.prompts):
        item = task.item("train", item_index(seed, i))
        prompt = [{"role": "user", "content": item.question}] if chat else item.prompt
        rows.append({"prompt": prompt, "index": item.ref.index})
    recorder = Recorder(task, stop_ids(model, tokenizer)[0])
    on_gpu = torch.cuda.is_available()
    args = GRPOConfig(output_dir=str(out / "trl" / model_name), max_steps=recipe.steps, seed=seed,
                      per_device_train_batch_size=recipe.prompts * recipe.group, num_generations=recipe.group,
                      max_completion_length=recipe.cap, temperature=recipe.temperature,
                      learning_rate=recommended_lr(model_name, False), beta=0.0, loss_type="grpo",
                      logging_steps=1, report_to="none", save_strategy="no", use_cpu=not on_gpu,
                      use_vllm=on_gpu and vllm_installed(), vllm_mode="colocate",
                      vllm_gpu_memory_utilization=0.3, shuffle_dataset=False)

    class Clock(TrainerCallback):
        def __init__(self):
            self.seconds: list[float] = []
            self.deadline = time.monotonic() + 60 * minutes
            self.started = 0.0

        def on_step_begin(self, args, state, control, **kwargs):
            self.started = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            self.seconds.append(time.perf_counter() - self.started)
            if time.monotonic() > self.deadline:
                control.should_training_stop = True

    clock = Clock()
    trainer = GRPOTrainer(model=model, reward_funcs=[recorder], args=args, train_dataset=Dataset.from_list(rows),
                          processing_class=tokenizer, callbacks=[clock])
    for printer in (PrinterCallback, ProgressCallback):  # (a dict of metrics a step otherwise: our table says it)
        trainer.remove_callback(printer)
    trainer.train()
    skip = 1 if len(clock.seconds) > 2 else 0  # (the first step warms up)
    seconds, tokens = clock.seconds[skip:], sum(recorder.tokens[skip:])
    first, last = ends(recorder.rewards)
    return {"trainer": "TRL GRPOTrainer" + (" (vLLM)" if args.use_vllm else " (transformers)"), "model": model_name,
            "steps": len(clock.seconds), "gen_tokens_s": None, "step_tokens_s": tokens / max(sum(seconds), 1e-9),
            "step_s": statistics.median(seconds), "straggler": straggler_rate(recorder.groups),
            "cut": statistics.mean(recorder.cut), "mean_g": float(recipe.group), "reward": (first, last)}


def item_index(seed: int, i: int) -> int:
    """The training index of the i-th prompt of a TRL run (a fixed stream, as a peer's seeded draw is)."""
    import random

    return random.Random(seed * 1_000_003 + i).randrange(2**31)


def vllm_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


def table(results: list[dict]) -> list[str]:
    def fmt(value, spec):
        return "-" if value is None else format(value, spec)

    lines = ["| trainer | model | steps | generation tokens/s | tokens per step second | step s (median) | "
             "straggler rate | cut at cap | mean G | reward first -> last fifth |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['trainer']} | {r['model']} | {r['steps']} | {fmt(r['gen_tokens_s'], '.0f')} | "
                     f"{r['step_tokens_s']:.0f} | {r['step_s']:.2f} | {r['straggler']:.3f} | {fmt(r['cut'], '.3f')} | "
                     f"{r['mean_g']:.1f} | {r['reward'][0]:.3f} -> {r['reward'][1]:.3f} |")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu-check", action="store_true", help="zoo models, a few steps, on the CPU")
    parser.add_argument("--minutes", type=float, default=4.0, help="budget of our swarm; TRL's runs get half each")
    parser.add_argument("--skip-trl", action="store_true")
    parser.add_argument("--out", default=str(ROOT / "bench" / "out" / "gpu_recipe"))
    args = parser.parse_args(argv)
    import torch

    from node.system.runtime import quiet_libraries

    quiet_libraries()
    recipe = CPU_CHECK if args.cpu_check else GPU
    if not args.cpu_check and not torch.cuda.is_available():
        print("no GPU here: run with --cpu-check for the CPU path", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "CPU"
    print(f"recipe on {device}: {', '.join(recipe.models)} on {recipe.task}, cap {recipe.cap}, "
          f"{recipe.prompts} prompts a step, G {recipe.group}", flush=True)
    results = ours(recipe, out, args.minutes)
    if not args.skip_trl:
        results += [trl_run(model, recipe, out, args.minutes / 2) for model in recipe.models]
    lines = table(results)
    (out / "results.json").write_text(json.dumps({"device": device, "recipe": recipe.__dict__, "results": results}))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
