"""Command line of the swarm node: `swarm run | zoo | tasks`.

Heavy libraries (torch, transformers) are imported inside the chosen subcommand, so `--help` is instant.
Every user error (bad configuration, unknown model or task) is one line on stderr and exit code 2.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import sys
import time
from pathlib import Path

EXIT_USAGE = 2


def _overrides(args) -> dict:
    """Named flags become --set assignments (they win over file and environment)."""
    from node.config import parse_assignments

    pairs = list(args.set or [])
    named = {
        "model.name": args.model, "model.lora": args.lora, "task.name": args.task, "task.split": args.split,
        "train.steps": args.steps, "train.group_size": args.group_size, "train.prompts_per_step": args.prompts,
        "train.seed": args.seed, "train.group_policy": args.group_policy, "train.batch_mode": args.batch_mode, "train.lr": args.lr, "loss.variant": args.variant,
        "loss.aggregation": args.aggregation, "generation.threads": args.threads,
    }
    pairs += [f"{key}={value}" for key, value in named.items() if value is not None]
    return parse_assignments(pairs)


def _zoo_progress():
    """A progress callback for zoo pre-training: a line every tenth of the steps."""
    last = {}

    def show(name, step, total, loss):
        if name not in last:
            last[name] = 0
            print(f"building zoo model {name} ({total} pre-training steps; cached afterwards)", file=sys.stderr)
        if step == total or step - last.get(name, 0) >= max(total // 10, 1):
            last[name] = step
            print(f"  pre-training {name}: step {step}/{total} loss {loss:.3f}", file=sys.stderr, flush=True)

    return show


def cmd_run(args) -> int:
    """Trains one peer alone on its task and prints a summary."""
    from node.config import load_config

    cfg = load_config(args.config, _overrides(args))
    from node.quiet import quiet_libraries

    quiet_libraries()
    from node.peer import Peer
    from node.progress import Progress, summary
    from node.tasks import get_task
    from node.zoo import ZOO, ensure_built

    get_task(cfg.task.name, cfg.task.data_files)  # an unknown task fails before any model is built
    if cfg.model.name in ZOO:  # first use builds the model: show it
        ensure_built(cfg.model.name, _zoo_progress())
    peer = Peer(cfg, shuffle_control=args.shuffle_rewards)
    n_params = sum(p.numel() for p in peer.loaded.model.parameters())
    group_text = (f"by SAGC from {list(cfg.sagc.candidates)}" if cfg.train.group_policy == "sagc"
                  else f"fixed {cfg.train.group_size}") + f" ({cfg.train.batch_mode})"
    print(f"peer: model {cfg.model.name} ({peer.loaded.source}, {n_params / 1e6:.2f}M params, "
          f"{'LoRA' if peer.loaded.lora else 'full fine-tuning'}), task {cfg.task.name}, {cfg.train.steps} steps"
          f", G {group_text}, loss {cfg.loss.variant}"
          f"/{cfg.loss.aggregation}", file=sys.stderr)
    progress = Progress(cfg.train.steps, every=args.log_every)
    results, start = [], time.monotonic()
    with contextlib.ExitStack() as stack:
        metrics_file = stack.enter_context(open(args.metrics, "w")) if args.metrics else None
        try:
            for step in range(cfg.train.steps):
                result = peer.step(step)
                results.append(result)
                progress.update(result)
                if metrics_file:
                    metrics_file.write(json.dumps(dataclasses.asdict(result)) + "\n")
        except KeyboardInterrupt:
            print("\ninterrupted: summary of the steps done so far", file=sys.stderr)
    print(f"summary ({cfg.model.name}, {'LoRA' if peer.loaded.lora else 'full fine-tuning'}, {cfg.task.name}):")
    print(summary(results, time.monotonic() - start))
    if args.out:
        from node.plots import plot_rewards

        out = Path(args.out)
        peer.save(out)
        plot_rewards([r.reward for r in results], out / "reward.png",
                     f"{cfg.model.name} on {cfg.task.name} ({cfg.loss.variant})")
        print(f"  saved model, resolved configuration and reward plot (reward.png) to {out}")
    return 0


def cmd_zoo(args) -> int:
    """Lists the zoo, or builds every model (cached) with progress."""
    from node.zoo import ZOO, model_dir

    if args.action == "list":
        for spec in ZOO.values():
            built = "built" if (model_dir(spec.name) / "config.json").exists() else "not built"
            print(f"{spec.name:<14} {spec.about:<42} {built}")
        return 0
    from node.quiet import quiet_libraries

    quiet_libraries()
    from node.zoo import ensure_built

    start = time.monotonic()
    for name in ZOO:
        print(f"{name}: {ensure_built(name, _zoo_progress())}")
    print(f"zoo ready in {time.monotonic() - start:.1f} s")
    return 0


def cmd_tasks(args) -> int:
    from node.tasks import task_names

    print("\n".join(task_names()))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="swarm", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="train one peer alone (no swarm)")
    run.add_argument("--config", help="TOML file with [model], [generation], [loss], [train], [task] tables")
    run.add_argument("--set", action="append", metavar="SECTION.FIELD=VALUE", help="override any field")
    run.add_argument("--model", help="zoo name, local directory or hub name (default tiny-add)")
    run.add_argument("--lora", action="store_const", const="true", help="train a LoRA adapter")
    run.add_argument("--task", help="task name (see `swarm tasks`)")
    run.add_argument("--split", help="train or test")
    run.add_argument("--steps", help="training steps")
    run.add_argument("--group-policy", help="sagc (default) or fixed")
    run.add_argument("--group-size", help="completions per prompt (G) under --group-policy fixed")
    run.add_argument("--batch-mode", help="fixed_prompts (default) or fixed_completions")
    run.add_argument("--prompts", help="prompts per step")
    run.add_argument("--seed")
    run.add_argument("--lr")
    run.add_argument("--variant", help="alone | nois | vis | tis | f-nois | f-vis | f-tis")
    run.add_argument("--aggregation", help="grpo | dapo")
    run.add_argument("--threads", help="torch threads (default 1)")
    run.add_argument("--shuffle-rewards", action="store_true", help="control run: permute rewards in each step")
    run.add_argument("--metrics", help="write one JSON line of metrics per step to this file")
    run.add_argument("--out", help="save the trained model, resolved configuration and a reward plot here")
    run.add_argument("--log-every", type=int, default=10, help="steps between progress lines when not a tty")
    run.set_defaults(func=cmd_run)

    zoo = sub.add_parser("zoo", help="list or build the offline model zoo")
    zoo.add_argument("action", choices=["list", "build"])
    zoo.set_defaults(func=cmd_zoo)

    tasks = sub.add_parser("tasks", help="list task names")
    tasks.set_defaults(func=cmd_tasks)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from node.errors import USER_ERRORS

    try:
        return args.func(args)
    except USER_ERRORS as err:
        print(f"swarm: error: {err}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
