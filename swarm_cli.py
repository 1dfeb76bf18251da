"""Command line of the swarm node: `swarm run | join | bootstrap | local | status | zoo | tasks`.

Heavy libraries (torch, transformers, hivemind) are imported inside the chosen subcommand, so `--help` is
instant. Every user error (bad configuration, unknown model or task, unreachable swarm) is one line on stderr
and a non-zero exit code (2 for bad input, 3 for an unreachable swarm or node).
"""
from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

EXIT_USAGE = 2
EXIT_UNREACHABLE = 3


def _overrides(args) -> dict:
    """Named flags become --set assignments (they win over file and environment)."""
    from node.config import parse_assignments

    pairs = list(args.set or [])
    named = {
        "model.name": args.model, "model.lora": args.lora, "task.name": args.task, "task.split": args.split,
        "train.steps": args.steps, "train.group_size": args.group_size, "train.prompts_per_step": args.prompts,
        "train.seed": args.seed, "train.group_policy": args.group_policy, "train.batch_mode": args.batch_mode,
        "train.lr": args.lr, "loss.variant": args.variant, "loss.aggregation": args.aggregation,
        "generation.threads": args.threads, "generation.backend": args.backend,
    }
    for key in ("initial_peers", "swarm", "identity", "host", "port", "announce", "startup_timeout"):
        value = getattr(args, key, None)
        if value is not None:
            value = ",".join(value) if isinstance(value, list) else value
            named["swarm.name" if key == "swarm" else f"swarm.{key}"] = value
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


def _prepare(cfg) -> None:
    """Checks the task, then builds the zoo model if needed, with progress (before any network)."""
    from node.quiet import quiet_libraries
    from node.tasks import get_task
    from node.zoo import ZOO, ensure_built

    quiet_libraries()
    get_task(cfg.task.name, cfg.task.data_files)  # an unknown task fails before any model is built
    if cfg.generation.backend == "vllm":  # a missing vLLM fails before any model or network
        from node.vllm_backend import import_vllm

        import_vllm()
    if cfg.model.name in ZOO:
        ensure_built(cfg.model.name, _zoo_progress())


def _describe(cfg, peer) -> str:
    n_params = sum(p.numel() for p in peer.loaded.model.parameters())
    group = (f"by SAGC from {list(cfg.sagc.candidates)}" if cfg.train.group_policy == "sagc"
             else f"fixed {cfg.train.group_size}")
    return (f"peer: model {cfg.model.name} ({peer.loaded.source}, {n_params / 1e6:.2f}M params, "
            f"{'LoRA' if peer.loaded.lora else 'full fine-tuning'}), task {cfg.task.name}, "
            f"{cfg.train.steps or 'unbounded'} steps, G {group} ({cfg.train.batch_mode}), "
            f"loss {cfg.loss.variant}/{cfg.loss.aggregation}, generation {peer.backend.name}")


def _train(args, cfg, peer, stop, status=None) -> int:
    """The step loop shared by `run` and `join`: progress, metrics file, summary, saved outputs."""
    from node.plots import plot_rewards
    from node.progress import Progress, summary
    from node.runner import metrics_writer, train_loop

    progress = Progress(cfg.train.steps, every=args.log_every)
    write = metrics_writer(args.metrics)

    def on_step(result):
        progress.update(result)
        write(result)

    start = time.monotonic()
    results = train_loop(peer, cfg.train.steps, stop, on_step, status)
    if stop.is_set():
        print("\nstopped: summary of the steps done so far", file=sys.stderr)
    print(f"summary ({cfg.model.name}, {'LoRA' if peer.loaded.lora else 'full fine-tuning'}, {cfg.task.name}):")
    print(summary(results, time.monotonic() - start))
    if args.out:
        out = Path(args.out)
        peer.save(out)
        plot_rewards([r.reward for r in results], out / "reward.png",
                     f"{cfg.model.name} on {cfg.task.name} ({cfg.loss.variant})")
        print(f"  saved model, resolved configuration and reward plot (reward.png) to {out}")
    return 0


def cmd_run(args) -> int:
    """Trains one peer alone on its task and prints a summary."""
    import threading

    from node.config import load_config

    cfg = load_config(args.config, _overrides(args))
    _prepare(cfg)
    from node.peer import Peer

    peer = Peer(cfg, shuffle_control=args.shuffle_rewards)
    print(_describe(cfg, peer), file=sys.stderr)
    stop = threading.Event()
    try:
        return _train(args, cfg, peer, stop)
    except KeyboardInterrupt:
        return 130
    finally:
        peer.close()


def cmd_join(args) -> int:
    """Joins a swarm: trains on own and received groups until stopped (or --steps)."""
    from node.config import load_config

    if args.initial_peers_file:
        from node.runner import read_address_file

        args.initial_peers = (args.initial_peers or []) + read_address_file(args.initial_peers_file,
                                                                            args.startup_timeout or 30.0)
    overrides = _overrides(args)
    if args.steps is None:
        overrides.setdefault("train", {})["steps"] = "0"  # a volunteer runs until stopped
    cfg = load_config(args.config, overrides)
    _prepare(cfg)
    from node.control import ControlServer, NodeStatus
    from node.peer import Peer
    from node.process import stop_on_signals
    from node.runner import connect, dht_settings
    from node.swarm_dht import Stopped

    status = NodeStatus(role="peer", model=cfg.model.name)
    server = dht = peer = None
    if args.control_port >= 0:  # first: a taken port fails before the swarm is joined
        server = ControlServer(lambda: status, host=args.control_host, port=args.control_port, serving=False)
        print(f"control API on {args.control_host}:{server.port}", file=sys.stderr, flush=True)
    stop = stop_on_signals(args.stop_timeout)
    try:
        try:
            dht = connect(dht_settings(cfg.swarm), args.join_attempts, stop)
        except Stopped as err:
            print(f"{err}", file=sys.stderr)
            return 0
        status.peer_id, status.maddrs = dht.peer_id, dht.visible_maddrs()
        peer = Peer(cfg, transport=dht)
        if server is not None:
            server.set_serving(True)
        print(_describe(cfg, peer), file=sys.stderr)
        print(f"joined swarm {cfg.swarm.name!r} as {dht.peer_id}", file=sys.stderr, flush=True)
        return _train(args, cfg, peer, stop, status)
    finally:
        if peer is not None:
            peer.close()
        if server is not None:
            server.stop()
        if dht is not None:
            dht.shutdown()


def cmd_bootstrap(args) -> int:
    """A DHT-only daemon that peers join through."""
    from node.process import stop_on_signals
    from node.runner import run_bootstrap
    from node.swarm_dht import DHTSettings

    identity = args.identity if args.identity is not None else str(
        Path.home() / ".local" / "share" / "swarm-node" / "bootstrap.id")
    settings = DHTSettings(swarm=args.swarm, host=args.host, port=args.port, announce=tuple(args.announce or ()),
                           identity_path=identity, startup_timeout=args.startup_timeout,
                           initial_peers=tuple(args.initial_peers or ()))
    return run_bootstrap(settings, args.status_every, args.control_port, stop_on_signals(args.stop_timeout),
                         lambda line: print(line, flush=True), address_file=args.address_file)


def cmd_local(args) -> int:
    """A bootstrap and N heterogeneous zoo peers as separate processes on loopback."""
    from node.local_swarm import run_local

    return run_local(args)


def cmd_status(args) -> int:
    """Asks a running node (peer or bootstrap) through its control API."""
    import grpc

    from node.control import query_health, query_status

    query = query_health if args.health else query_status  # health: the standard grpc.health.v1 check
    try:
        reply = query(args.address, timeout=args.timeout)
    except grpc.RpcError as err:
        print(f"swarm: error: no node answers at {args.address} ({err.code().name})", file=sys.stderr)
        return EXIT_UNREACHABLE
    if args.health:  # docker health checks use this
        print(reply)
        return 0 if reply == "SERVING" else 1
    rejected = ", ".join(f"{k} {v}" for k, v in sorted(reply.rejected.items())) or "none"
    lines = [f"{reply.role} {reply.peer_id} (up {reply.uptime:.0f} s)"]
    if reply.role == "peer":
        lines.append(f"model {reply.model}, step {reply.step}, G {reply.group_size}, reward {reply.reward:.3f}, "
                     f"lambda {getattr(reply, 'lambda'):.2f}")
    lines.append(f"peers {reply.peers}, groups out {reply.groups_out}, in {reply.groups_in}, "
                 f"rejected: {rejected}" + (f", {reply.groups_per_minute:.0f} groups/min"
                                            if reply.role == "bootstrap" else ""))
    lines += [f"address {m}" for m in reply.maddrs]
    print("\n".join(lines))
    return 0


def cmd_zoo(args) -> int:
    """Lists the zoo, or builds every model (cached) with progress."""
    from node.zoo import ZOO, model_dir

    if args.action == "list":
        for spec in ZOO.values():
            built = "built" if (model_dir(spec.name) / "config.json").exists() else "not built"
            print(f"{spec.name:<14} {spec.about:<48} {built}")
        return 0
    from node.quiet import quiet_libraries
    from node.zoo import ensure_built

    quiet_libraries()
    start = time.monotonic()
    for name in ZOO:
        print(f"{name}: {ensure_built(name, _zoo_progress())}")
    print(f"zoo ready in {time.monotonic() - start:.1f} s")
    return 0


def cmd_tasks(args) -> int:
    from node.tasks import task_names

    print("\n".join(task_names()))
    return 0


def _peer_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="TOML file with [model] [generation] [loss] [train] [task] [sagc] [swarm]")
    p.add_argument("--set", action="append", metavar="SECTION.FIELD=VALUE", help="override any field")
    p.add_argument("--model", help="zoo name, local directory or hub name (default tiny-add)")
    p.add_argument("--lora", action="store_const", const="true", help="train a LoRA adapter")
    p.add_argument("--task", help="task name (see `swarm tasks`)")
    p.add_argument("--split", help="train or test")
    p.add_argument("--steps", help="training steps (join: default 0, i.e. until stopped)")
    p.add_argument("--group-policy", help="sagc (default) or fixed")
    p.add_argument("--group-size", help="completions per prompt (G) under --group-policy fixed")
    p.add_argument("--batch-mode", help="fixed_prompts (default) or fixed_completions")
    p.add_argument("--prompts", help="prompts per step")
    p.add_argument("--seed")
    p.add_argument("--lr")
    p.add_argument("--variant", help="alone | nois | vis | tis | f-nois | f-vis | f-tis")
    p.add_argument("--aggregation", help="grpo | dapo")
    p.add_argument("--threads", help="torch threads (default 1)")
    p.add_argument("--backend", help="generation backend: transformers (default) or vllm")
    p.add_argument("--metrics", help="append one JSON line of metrics per step to this file")
    p.add_argument("--out", help="save the trained model, resolved configuration and a reward plot here")
    p.add_argument("--log-every", type=int, default=10, help="steps between progress lines when not a tty")


def _network_arguments(p: argparse.ArgumentParser, default_port: int | None) -> None:
    p.add_argument("--initial-peers", action="append", metavar="MULTIADDR",
                   help="bootstrap or peer multiaddr (repeat, or comma-separate)")
    p.add_argument("--swarm", default=None if default_port is None else "default", help="swarm name")
    p.add_argument("--identity", help="identity file (stable peer id across restarts)")
    p.add_argument("--host", default=None if default_port is None else "127.0.0.1",
                   help="interface to listen on (0.0.0.0 in containers)")
    p.add_argument("--port", type=int, default=default_port, help="DHT TCP port (0: any free port)")
    p.add_argument("--announce", action="append", metavar="MULTIADDR", help="address to announce (public hosts)")
    p.add_argument("--startup-timeout", type=float, default=None if default_port is None else 30.0,
                   help="p2pd start-up time-out, seconds")
    p.add_argument("--stop-timeout", type=float, default=20.0,
                   help="seconds after SIGTERM / Ctrl-C within which the process ends, gracefully or not "
                        "(default 20)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="swarm", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="train one peer alone (no swarm)")
    _peer_arguments(run)
    run.add_argument("--shuffle-rewards", action="store_true", help="control run: permute rewards in each step")
    run.set_defaults(func=cmd_run)

    join = sub.add_parser("join", help="join a swarm and train with it until stopped")
    _peer_arguments(join)
    _network_arguments(join, default_port=None)
    join.add_argument("--join-attempts", type=int, default=0, help="tries to reach the swarm (0: until stopped)")
    join.add_argument("--initial-peers-file", help="read initial peers from this file (one multiaddr a line; "
                      "waits up to --startup-timeout for it to appear)")
    join.add_argument("--control-port", type=int, default=0, help="control API port (0: any free, -1: off)")
    join.add_argument("--control-host", default="127.0.0.1", help="control API interface")
    join.set_defaults(func=cmd_join)

    boot = sub.add_parser("bootstrap", help="run a DHT-only bootstrap node")
    _network_arguments(boot, default_port=31330)
    boot.add_argument("--status-every", type=float, default=30.0, help="seconds between status lines")
    boot.add_argument("--address-file", help="also write the multiaddrs here (peers read it: --initial-peers-file)")
    boot.add_argument("--control-port", type=int, default=-1, help="control API port (0: any free, -1: off)")
    boot.set_defaults(func=cmd_bootstrap)

    local = sub.add_parser("local", help="a local swarm: bootstrap + heterogeneous zoo peers as processes")
    local.add_argument("--peers", type=int, default=4, help="number of peers (models cycle through the zoo)")
    local.add_argument("--models", help="comma-separated zoo models to cycle through")
    local.add_argument("--steps", type=int, default=150, help="training steps per peer")
    local.add_argument("--task", default="arith-add", help="task all peers train on")
    local.add_argument("--variant", default="f-tis", help="loss variant of every peer")
    local.add_argument("--backend", default="transformers", help="generation backend of every peer: "
                       "transformers or vllm")
    local.add_argument("--out", default="runs/local", help="logs, metrics, summary and plot go here")
    local.add_argument("--set", action="append", metavar="SECTION.FIELD=VALUE", help="passed to every peer")
    local.set_defaults(func=cmd_local)

    status = sub.add_parser("status", help="ask a running node through its control API")
    status.add_argument("address", help="host:port of the node's control API")
    status.add_argument("--timeout", type=float, default=5.0)
    status.add_argument("--health", action="store_true", help="only the gRPC health check (exit 0 if SERVING)")
    status.set_defaults(func=cmd_status)

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
    from node.errors import UNREACHABLE_ERRORS, USER_ERRORS

    try:
        return args.func(args)
    except USER_ERRORS as err:
        print(f"swarm: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except UNREACHABLE_ERRORS as err:
        print(f"swarm: error: {err}", file=sys.stderr)
        return EXIT_UNREACHABLE


if __name__ == "__main__":
    sys.exit(main())
