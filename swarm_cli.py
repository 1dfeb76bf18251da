"""Command line of the swarm node: `swarm run | join | bootstrap | local | status | eval | zoo | tasks | policies |
credit`.

Heavy libraries (torch, transformers, hivemind) are imported inside the chosen subcommand, so `--help` is
instant. Every subcommand that takes a configuration resolves it through node/config.py (flags, --set,
SWARM_SECTION__FIELD variables, --config TOML, the subcommand's own defaults). Every user error (bad
configuration, unknown model or task, unreachable swarm) is one line on stderr and a non-zero exit code (2 for
bad input, 3 for an unreachable swarm or node).
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import argparse

EXIT_USAGE = 2
EXIT_UNREACHABLE = 3


# a volunteer runs until stopped, and sees held-out accuracy move: a small fixed set every 50 steps (a few
# seconds on the zoo; --eval-every 0 turns it off)
JOIN_DEFAULTS = {"train": {"steps": 0}, "eval": {"every": 50, "prompts": 64},
                 "task": {"name": "swarm"}}  # (node/swarm/swarm_task.py SWARM: the task the swarm's peers announce)
BOOTSTRAP_DEFAULTS = {"swarm": {"port": 31330,  # a well-known port peers are told about
                                "identity": str(Path.home() / ".local" / "share" / "swarm-node" / "bootstrap.id")}}


def check_writable(folder: str | None, what: str) -> None:
    """Refuses, in one line and before any training, an output folder that cannot be created or written."""
    if not folder:
        return
    import tempfile

    from node.errors import ConfigError

    try:
        Path(folder).mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as err:
        raise ConfigError(f"{what} {folder!r} is not writable: {err.strerror or err}") from None


def _prepare(cfg) -> None:
    """Checks the task (unless it is the swarm's, learnt once joined), the transfer policy, the backend and a
    zoo model's files (before any network)."""
    from node.models.loading import check_model
    from node.swarm.swarm_task import SWARM
    from node.system.runtime import quiet_libraries

    quiet_libraries()
    if cfg.task.name != SWARM:
        _prepare_task(cfg)
    if cfg.generation.backend == "vllm":  # a missing vLLM fails before any model or network
        from node.generation.vllm_backend import import_vllm

        import_vllm()
    check_model(cfg.model.name)  # a zoo model missing or damaged, a mistyped name, a hub model not to be had:
    #                               one line now, not after joining the swarm


def _prepare_task(cfg) -> None:
    """An unknown task, one whose data cannot be had, or a transfer policy unknown or unfit for it: one line
    before any model is built."""
    from node.rl.transfer.registry import build_policy
    from node.tasks import checks_work, get_task

    task = get_task(cfg.task.name, cfg.task.data_files)
    task.item(cfg.task.split, 0)
    build_policy(cfg.transfer, checks_work(task))


def _settle_task(args, cfg, dht):
    """cfg with the task this peer trains on: the swarm's (read from its announcements) when --task is left out;
    its own when it names one, said in one line, and a ConfigError when it differs from the swarm's unless
    --other-task keeps it."""
    import dataclasses

    from node.config import TaskConfig
    from node.errors import ConfigError
    from node.swarm.swarm_task import Found, read_swarm_task, settle

    found = read_swarm_task(dht, cfg.swarm.max_age) if cfg.swarm.initial_peers else Found(None, 0, 0)
    settled = settle(cfg.task.name, cfg.generation.max_new_tokens, found, TaskConfig().name)
    if settled.mismatch and not args.other_task:
        raise ConfigError(f"{settled.line}: leave --task out to train the swarm's task, or pass --other-task to "
                          f"train yours here anyway (the swarm then refuses its groups, and it theirs)")
    print(settled.line + ("; kept (--other-task): its groups and the swarm's are refused both ways"
                          if settled.mismatch else ""), file=sys.stderr, flush=True)
    cfg = dataclasses.replace(cfg, task=dataclasses.replace(cfg.task, name=settled.task),
                              generation=dataclasses.replace(cfg.generation, max_new_tokens=settled.answer_cap))
    _prepare_task(cfg)
    return cfg


def _describe(cfg, peer) -> str:
    n_params = sum(p.numel() for p in peer.loaded.model.parameters())
    group = (f"by SAGC from {list(cfg.sagc.candidates)}" if cfg.train.group_policy == "sagc"
             else f"fixed {cfg.train.group_size}")
    return (f"peer: model {cfg.model.name} ({peer.loaded.source}, {n_params / 1e6:.2f}M params, "
            f"{'LoRA' if peer.loaded.lora else 'full fine-tuning'}), task {cfg.task.name}, "
            f"{cfg.train.steps or 'unbounded'} steps, G {group} ({cfg.train.batch_mode}), "
            f"loss {cfg.loss.aggregation}, generation {peer.backend.name}, learner passes of at most "
            f"{peer.learner.budget:,} padded tokens ({'set' if cfg.train.micro_batch_tokens else 'automatic'})\n"
            f"{peer.transfer_line()}")


def _resume_point(args) -> Path | None:
    """The checkpoint in --out this run goes on from (None: a fresh start); says which, and one line for each
    newer checkpoint that was unusable (the previous one is taken). --fresh sets earlier ones aside."""
    if not args.out:
        return None
    from node.models.saved import latest_checkpoint, remove_unfinished, set_aside

    out = Path(args.out)
    if args.fresh:
        moved = set_aside(out)
        if moved:
            print(f"--fresh: earlier checkpoints moved to {moved}", file=sys.stderr)
        return None
    for stale in remove_unfinished(out):
        print(f"removed an unfinished write ({stale.relative_to(out)}): a stop during the write", file=sys.stderr)
    found = latest_checkpoint(out)
    for line in found.skipped:
        print(line, file=sys.stderr)
    if found.path is not None:
        print(f"resuming from {found.path} ({found.step} steps done; --fresh starts again)", file=sys.stderr)
    return found.path


def _exporter(args, cfg):
    """The Prometheus endpoint (--metrics-port), started before any model is loaded (a taken port fails first)."""
    if args.metrics_port is None:
        return None
    from node.observability.exporter import MetricsExporter

    return MetricsExporter(args.metrics_port, args.metrics_host, cfg.model.name, cfg.swarm.name)


def _dashboard(args, status):
    """The web dashboard (--dashboard-port), started before the swarm is joined (a taken port fails first)."""
    if getattr(args, "dashboard_port", None) is None:
        return None
    from node.observability.dashboard import Dashboard

    return Dashboard(status.snapshot, args.dashboard_port, args.dashboard_host)


def _say_where(server=None, host: str = "", exporter=None, board=None) -> None:
    """Where the node answers, said once it is up (a taken port, a locked identity or a swarm not reached is
    then the only line: the servers start first so that a taken port of theirs fails first, silently)."""
    if server is not None:
        print(f"control API on {host}:{server.port}", file=sys.stderr, flush=True)
    if exporter is not None:
        print(f"Prometheus metrics on {exporter.url}", file=sys.stderr, flush=True)
    if board is not None:
        print(f"dashboard on {board.url}", file=sys.stderr, flush=True)


def _dashboard_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dashboard-port", type=_number(int, 0, 65535), help="serve a web dashboard of the swarm and "
                   "this node on this port (0: any free port; default: off)")
    p.add_argument("--dashboard-host", default="127.0.0.1", help="interface of the dashboard (0.0.0.0 in "
                   "containers) (default: 127.0.0.1)")


def _train(args, cfg, peer, stop, status=None, exporter=None) -> int:
    """The step loop shared by `run` and `join`: progress, metrics file, checkpoints, summary, saved outputs."""
    from node.app.runner import train_loop
    from node.metrics import metrics_writer, truncate_metrics
    from node.observability.report import Presence, Progress, RunLog, plot_rewards, summary
    from node.persistence.checkpoint import Checkpointer, save_outputs

    run_log = RunLog(cfg.train.steps, totals=status.totals if status is not None else None)  # one running total:
    if exporter is not None:  # the summary, `swarm status` and Prometheus read it
        exporter.watch(run_log.totals)
    if status is not None:  # the dashboard reads the run's curves when asked
        status.curves = run_log.curves
    if peer.start_step:
        run_log.load(peer.history, peer.start_step)
        truncate_metrics(args.metrics, peer.start_step)
    progress = Progress(cfg.train.steps, every=args.log_every)
    presence = Presence() if peer.exchange is not None else None
    write = metrics_writer(args.metrics)
    board = None
    if args.tensorboard:
        from node.observability.tensorboard import TensorBoardLogger

        board = TensorBoardLogger(args.tensorboard)
    out = Path(args.out) if args.out else None
    checkpointer = Checkpointer(peer, out, cfg.checkpoint, run_log.state, peer.start_step) if out else None

    def on_step(result):
        progress.update(result)
        write(result)
        if board is not None:
            board.log(result)
        run_log.add(result)
        if exporter is not None:
            exporter.update(result)
        said = presence.update(result.swarm.peers) if presence else None
        if said:
            progress.say(said)
        if checkpointer is not None:
            checkpointer.after_step(result.step + 1)

    start = time.monotonic()
    try:
        done = train_loop(peer, cfg.train.steps, stop, on_step, status, start=peer.start_step)
    finally:
        if board is not None:
            board.close()
    if stop.is_set():
        print("\nstopped: summary of the steps done so far", file=sys.stderr)
    if checkpointer is not None and checkpointer.save(done):
        print(f"checkpoint after step {done} in {out / 'checkpoints'}", file=sys.stderr)
    print(f"summary ({cfg.model.name}, {'LoRA' if peer.loaded.lora else 'full fine-tuning'}, {cfg.task.name}):")
    print(summary(run_log, time.monotonic() - start, cfg.train.steps))
    if out is not None:
        try:
            save_outputs(peer, out, done, run_log.last_eval)
            plot_rewards(*run_log.rewards_curve(), out / "reward.png",
                         f"{cfg.model.name} on {cfg.task.name} ({cfg.transfer.policy})", evals=run_log.evals)
        except (OSError, RuntimeError) as err:  # e.g. a full disk: the checkpoints stay usable
            from node.errors import first_line

            print(f"swarm: error: outputs not saved to {out}: {getattr(err, 'strerror', None) or first_line(err)}"
                  f" (its newest checkpoint still holds the model)", file=sys.stderr)
            return 1
        print(f"  saved model (model/), resolved configuration (swarm-config.toml) and a plot of held-out accuracy "
              f"and reward (reward.png) "
              f"to {out}; `--model {out}` trains it further")
    return 0


def cmd_run(args) -> int:
    """Trains one peer alone on its task and prints a summary."""
    from node.config import config_from_args

    stop = args.stop  # SIGTERM / Ctrl-C, handled since main() began: the step ends, a checkpoint is written
    cfg = config_from_args(args)
    check_writable(args.out, "--out")
    _prepare(cfg)
    stop.check()
    from node.persistence.checkpoint import resume_peer

    stop.check()
    exporter = _exporter(args, cfg)
    peer = None
    try:
        peer = resume_peer(cfg, _resume_point(args), shuffle_control=args.shuffle_rewards)
        stop.check()
        _say_where(exporter=exporter)
        print(_describe(cfg, peer), file=sys.stderr)
        return _train(args, cfg, peer, stop.event, exporter=exporter)
    finally:
        if peer is not None:
            peer.close()
        if exporter is not None:
            exporter.close()


def cmd_join(args) -> int:
    """Joins a swarm: trains on own and received groups until stopped (or --steps)."""
    import dataclasses

    from node.config import config_from_args

    stop = args.stop
    cfg = config_from_args(args, JOIN_DEFAULTS)
    from node.swarm.addresses import check_addresses

    check_addresses(cfg.swarm.initial_peers, cfg.swarm.announce)  # before anything starts: one line, exit 2
    if args.initial_peers_file:
        from node.app.runner import read_address_file

        found = read_address_file(args.initial_peers_file, cfg.swarm.startup_timeout, stop.event)
        check_addresses(found, source=f"--initial-peers-file {args.initial_peers_file}:")
        cfg = dataclasses.replace(cfg, swarm=dataclasses.replace(
            cfg.swarm, initial_peers=(*cfg.swarm.initial_peers, *found)))
    check_writable(args.out, "--out")
    _prepare(cfg)
    stop.check()
    from node.app.runner import connect
    from node.persistence.checkpoint import resume_peer
    from node.swarm.control import ControlServer, NodeStatus

    status = NodeStatus(role="peer", model=cfg.model.name)
    server = dht = peer = exporter = board = None
    receipts = Path(args.out) / "receipts.jsonl" if args.out else None
    try:
        if args.control_port >= 0:  # first: a taken port fails before the swarm is joined
            server = ControlServer(lambda: status, host=args.control_host, port=args.control_port, serving=False)
        exporter = _exporter(args, cfg)
        board = _dashboard(args, status)
        stop.check()
        dht = connect(cfg.swarm, args.join_attempts, stop.event)
        status.peer_id, status.maddrs = dht.peer_id, dht.visible_maddrs()
        stop.check()
        cfg = _settle_task(args, cfg, dht)
        stop.check()
        peer = resume_peer(cfg, _resume_point(args), transport=dht, receipts_file=receipts)
        status.task = peer.exchange.task.describe() if peer.exchange is not None else cfg.task.name
        stop.check()
        if server is not None:
            server.set_serving(True)
        _say_where(server, args.control_host, exporter, board)
        print(_describe(cfg, peer), file=sys.stderr)
        if cfg.swarm.initial_peers:
            print(f"joined swarm {cfg.swarm.name!r} as {dht.peer_id}", file=sys.stderr, flush=True)
        else:  # nobody to join: this peer is the swarm's first node, and says how others reach it
            print(f"no initial peers: starting a new swarm {cfg.swarm.name!r} as {dht.peer_id}; others join "
                  f"with --initial-peers and one of:", file=sys.stderr, flush=True)
            for maddr in status.maddrs:
                print(f"  {maddr}", file=sys.stderr, flush=True)
        return _train(args, cfg, peer, stop.event, status, exporter)
    finally:
        if peer is not None:
            peer.close()
        if server is not None:
            server.stop()
        if exporter is not None:
            exporter.close()
        if board is not None:
            board.close()
        if dht is not None:
            dht.shutdown()


def say(line: str) -> None:
    """A line to stdout. A reader that went away (the other end of a pipe closed: a `swarm local` that died,
    `| head`) is no error: what follows goes to /dev/null, and the node stops or goes on as it would."""
    try:
        print(line, flush=True)
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # (the line still buffered is flushed there at exit)
        os.close(devnull)


def cmd_bootstrap(args) -> int:
    """A DHT-only daemon that peers join through."""
    from node.app.runner import run_bootstrap
    from node.config import config_from_args
    from node.errors import ConfigError

    cfg = config_from_args(args, BOOTSTRAP_DEFAULTS)  # a file shared with the peers works: [swarm] is read
    from node.swarm.addresses import check_addresses

    check_addresses(cfg.swarm.initial_peers, cfg.swarm.announce)
    if cfg.swarm.client_mode:
        raise ConfigError("swarm.client_mode: a bootstrap must accept connections (client mode is for peers "
                          "behind NAT)")
    args.stop.check()
    return run_bootstrap(cfg.swarm, args.status_every, args.control_port, args.stop.event,
                         say, address_file=args.address_file,
                         dashboard=lambda status: _dashboard(args, status))


def cmd_local(args) -> int:
    """A bootstrap and N heterogeneous zoo peers as separate processes on loopback."""
    from node.app.local_swarm import LOCAL_DEFAULTS, run_local
    from node.config import config_from_args

    cfg = config_from_args(args, LOCAL_DEFAULTS)  # checked here: one line for a bad value, before anything
    return run_local(args, cfg, args.stop)


def cmd_status(args) -> int:
    """Asks a running node (peer or bootstrap) through its control API."""
    import grpc

    from node.swarm.addresses import control_address_problem
    from node.swarm.control import query_health, query_status

    problem = control_address_problem(args.address)
    if problem:
        print(f"swarm: error: {args.address!r} {problem}", file=sys.stderr)
        return EXIT_USAGE
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
        lines.append(f"model {reply.model}, task {reply.task or '?'}, step {reply.step}, G {reply.group_size}, "
                     f"reward {reply.reward:.3f}, lambda {getattr(reply, 'lambda'):.2f}")
    elif reply.task:
        lines.append(f"the swarm's task: {reply.task}")
    lines.append(f"peers {reply.peers}, groups out {reply.groups_out}, in {reply.groups_in}, "
                 f"rejected: {rejected}" + (f", {reply.groups_per_minute:.0f} groups/min"
                                            if reply.role == "bootstrap" else ""))
    if reply.role == "peer":
        c = reply.credit
        lines.append(f"credit: {c.rows} rows in {c.groups} groups of ours trained on by {c.receivers} "
                     f"peer{'s' if c.receivers != 1 else ''}, from {c.receipts} signed receipts"
                     + (f" (check them: swarm credit verify {c.file})" if c.file and c.receipts else "")
                     + f"; {reply.credited} groups as {reply.credited_by} peer{'s' if reply.credited_by != 1 else ''}"
                       f" say in their announcements")
    if reply.distrusted or reply.demoted:
        lines.append(f"senders distrusted for good {reply.distrusted} (false log-probs), demoted {reply.demoted} "
                     "(their groups pulled against ours)")
    if reply.accuracy:
        from node.observability.report import accuracy_change

        lines.append(f"held-out accuracy after step {reply.accuracy_step}: "
                     f"{accuracy_change({}, dict(reply.accuracy))}")
    lines += [f"address {m}" for m in reply.maddrs]
    if reply.peer_list:
        from node.swarm.display import MAX_STEP, safe_count, safe_params, safe_text

        order = ", the latest read first" if len(reply.peer_list) > 1 else ""
        lines.append(f"known peers ({len(reply.peer_list)}{order}; model, size and step as each peer claims):")
        for p in reply.peer_list:  # what peers claim is shown so it cannot disguise itself
            trust = ("" if reply.role == "bootstrap" else
                     ", established" if p.established else ", newcomer")
            model = f"{safe_text(p.model, 48)} ({safe_text(p.family, 24)}" if p.model else f"({safe_text(p.family, 24)}"
            lines.append(f"  {safe_text(p.peer_id, 64)}  {model} {safe_params(p.params)})"
                         f"{' LoRA' if p.lora else ''}, step {safe_count(p.step, MAX_STEP)}, "
                         f"read {p.age:.0f} s ago{trust}" + (f", {p.failures} failed pulls" if p.failures else "")
                         + (f", task {safe_text(p.task, 48)}" if p.task and not reply.task.startswith(p.task)
                            else "")
                         + (f"; {p.tokens} of its tokens trained on, mean weight {p.mean_weight:.2f}, "
                            f"{100 * p.capped_share:.1f}% at the weight cap" if p.tokens else "")
                         + (f"; signed for {p.receipted_rows} rows of ours" if p.receipted_rows else ""))
    print("\n".join(lines))
    return 0


CUT_WARNING = 0.5  # swarm eval says so when at least this share of a split's answers hit the completion cap


def cmd_eval(args) -> int:
    """Held-out accuracy of a model (greedy and sampled pass@1) on a task's splits, through its backend."""
    import json

    from node.config import config_from_args, with_completion_cap
    from node.evaluation import evaluate
    from node.generation import make_backend
    from node.models.loading import (
        describe_saved,
        eval_defaults,
        load_model,
        read_meta,
        saved_model_folder,
        skipped_checkpoints,
    )
    from node.system.runtime import set_threads
    from node.tasks import completion_cap, get_task

    cfg = config_from_args(args)
    folder = saved_model_folder(cfg.model.name)
    if folder is not None:  # a peer's saved model: its task and eval settings, unless given here
        cfg = config_from_args(args, defaults=eval_defaults(read_meta(folder)))
        for line in skipped_checkpoints(cfg.model.name):
            print(f"swarm eval: {line}", file=sys.stderr)
        print(f"swarm eval: evaluating {describe_saved(folder)}", file=sys.stderr)
    _prepare(cfg)
    task = get_task(cfg.eval.task or cfg.task.name, cfg.task.data_files)  # an unknown eval.task: before the model
    cfg = with_completion_cap(cfg, completion_cap(task))
    set_threads(cfg.generation.threads)
    loaded = load_model(cfg.model, seed=cfg.train.seed)
    backend = make_backend(cfg.generation, loaded, seed=cfg.train.seed)
    try:
        scores, seconds = evaluate(backend, loaded.tokenizer, task, cfg.eval)
    finally:
        backend.close()
    if not scores:
        print(f"swarm: error: task {task.name!r} has none of the splits {', '.join(cfg.eval.splits)}",
              file=sys.stderr)
        return EXIT_USAGE
    cut = max(s.cut for s in scores)
    if cut >= CUT_WARNING:  # the verifier scores a cut answer 0: a model that writes more than the cap scores 0
        print(f"swarm eval: {cut:.0%} of the answers hit the completion cap of {cfg.generation.max_new_tokens} tokens "
              f"and score 0; a model that writes more than the task's answers need (a real model restating the "
              f"question, a worked solution) needs --set generation.max_new_tokens=N", file=sys.stderr)
    if args.json:
        print(json.dumps({"model": cfg.model.name, "task": task.name, "seconds": seconds,
                          "splits": [vars(s) for s in scores]}))
        return 0
    names = {"train": "train (in distribution)", "test": "test (out of distribution)"}
    print(f"{cfg.model.name} on {task.name}, {cfg.eval.prompts} held-out prompts per split, "
          f"{backend.name} backend ({seconds:.1f} s)")
    sampled_head = f"sampled pass@1 (x{cfg.eval.samples})" if cfg.eval.samples else "sampled pass@1 (off)"
    print(f"  {'split':<28} {'greedy pass@1':>13} {sampled_head:>22}")
    for s in scores:
        sampled = "-" if s.sampled is None else f"{s.sampled:.3f}"
        print(f"  {names.get(s.split, s.split):<28} {s.greedy:>13.3f} {sampled:>22}")
    return 0


def cmd_export(args) -> int:
    """A trained peer's model as a Hugging Face-ready folder (weights or merged LoRA, tokenizer, model card)."""
    from node.models.export import export_model, push_to_hub
    from node.models.loading import describe_saved

    used = export_model(args.source, Path(args.target))
    print(f"exported {describe_saved(used)} to {args.target} (weights, tokenizer, README.md model card)")
    if args.push_to_hub:
        print(f"pushed to {push_to_hub(Path(args.target), args.push_to_hub)}")
    return 0


def cmd_zoo(args) -> int:
    """Lists the zoo in use, or runs its recipe: builds models into a folder, or rebuilds and compares."""
    if args.action == "list":
        return _zoo_list()
    return _zoo_build(args)


def _zoo_list() -> int:
    from node.models.zoo import ZOO, recipe_hash, weights_spec
    from node.models.zoo_store import active_zoo, damage, is_shipped, read_manifest

    root = active_zoo()
    print(f"zoo in use: {'shipped with swarm-node' if is_shipped(root) else 'SWARM_ZOO_DIR'} ({root})")
    models = read_manifest(root)["models"]
    for name, spec in ZOO.items():
        entry = models.get(weights_spec(name).name)
        if entry is None:
            state = "missing"
        elif damage(root, weights_spec(name).name, entry):
            state = "damaged"
        elif entry.get("recipe") != recipe_hash(weights_spec(name)):
            state = f"built with other seeds (+{entry['seed_offset']})" if entry.get("seed_offset") else \
                "built from an older recipe"
        else:
            state = "ok" if not spec.base else f"ok (the weights of {spec.base})"
        print(f"  {name:<14} {spec.about:<46} {state}")
    return 0


def _zoo_build(args) -> int:
    import tempfile

    from node.errors import ConfigError
    from node.models.zoo import ZOO
    from node.models.zoo_store import (
        BuildProgress,
        active_zoo,
        build_zoo,
        buildable,
        compare_models,
        read_manifest,
        zoo_model_path,
    )
    from node.system.runtime import quiet_libraries

    names = [m.strip() for m in args.models.split(",")] if args.models else buildable()
    for name in names:
        if name not in ZOO or ZOO[name].base:
            raise ConfigError(f"zoo build: {name!r} is not a zoo model with weights of its own "
                              f"(one of {', '.join(buildable())})")
    if not args.out and not args.check:
        raise ConfigError("zoo build: give --out DIR (then SWARM_ZOO_DIR=DIR uses it) or --check")
    if args.check and args.seed_offset:
        raise ConfigError("zoo build: --check rebuilds the zoo in use as its manifest says; --seed-offset would "
                          "build something else")
    reference = active_zoo()
    offsets = dict.fromkeys(names, args.seed_offset)
    if args.check:  # what we compare against must itself be intact; rebuilt with the seeds it was built with
        for name in names:
            zoo_model_path(name)
        recorded = read_manifest(reference)["models"]
        offsets = {name: recorded[name].get("seed_offset", 0) for name in names}
    quiet_libraries()
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="swarm-zoo-") as scratch:
        out = Path(args.out) if args.out else Path(scratch)
        check_writable(str(out), "--out")
        print(f"building {len(names)} zoo model{'s' if len(names) > 1 else ''} ({', '.join(names)}) into {out}, "
              f"{min(args.workers, len(names))} at a time: done once, then peers load them from there "
              "(a time estimate follows a tenth of the first model's steps; on a 2-core machine the char digit "
              "models took 9-11 min each, the BPE ones about 4.5 min)", file=sys.stderr, flush=True)
        build_zoo(out, offsets, BuildProgress(len(names), args.workers), args.workers)
        print(f"built {', '.join(names)} into {out} in {time.monotonic() - start:.0f} s"
              + (f" (seeds +{args.seed_offset})" if args.seed_offset else "")
              + (f"; use it with SWARM_ZOO_DIR={out}" if args.out else ""))
        if not args.check:
            return 0
        diffs = [compare_models(reference, out, name) for name in names]
    print(f"rebuilt on this machine vs {reference}:")
    for d in diffs:
        print(f"  {d.name:<14} " + ("identical, bit for bit" if d.identical else
                                    f"differs: {d.differing} of {d.tensors} tensors, max |diff| {d.max_abs:.3g} "
                                    f"({d.worst or 'shapes'})" + ("" if d.tokenizer_same else ", tokenizer too")))
    return 0 if all(d.identical for d in diffs) else 1


def cmd_policies(args) -> int:
    from node.rl.transfer.registry import AUTO, registry, resolve

    print(f"{AUTO:<19} {resolve(AUTO, True)} where the task's verifier checks the work, else {resolve(AUTO, False)}")
    for name, cls in registry().items():
        print(f"{name:<19} {cls.summary}")
    return 0


def cmd_credit(args) -> int:
    """`swarm credit verify FILE`: checks every receipt of a receipts file with its receiver's public key (offline)
    and prints what they credit, by receiver; exit 1 when one does not check out."""
    import collections

    from node.swarm.receipts import verify_line
    from protocol.receipts import ReceiptError

    try:
        lines = Path(args.file).read_text().splitlines()
    except (OSError, UnicodeDecodeError) as err:
        print(f"swarm credit: error: cannot read {args.file}: {getattr(err, 'strerror', None) or err}",
              file=sys.stderr)
        return 1
    by = collections.defaultdict(lambda: [0, 0, 0])  # (receiver, generator) -> receipts, groups, rows
    bad = 0
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            r = verify_line(line)
        except ReceiptError as err:
            bad += 1
            print(f"line {number}: not verified: {err}", file=sys.stderr)
            continue
        counts = by[r.receiver, r.generator]
        counts[0] += 1
        counts[1] += len(r.groups)
        counts[2] += r.rows
    for (receiver, generator), (receipts, groups, rows) in sorted(by.items()):
        print(f"receiver {receiver} credits {generator}: {rows} rows in {groups} groups ({receipts} receipts)")
    verified = sum(c[0] for c in by.values())
    print(f"{verified} receipts verified, {bad} not", file=sys.stderr)
    return 1 if bad or not verified else 0


def cmd_tasks(args) -> int:
    from node.tasks import task_names

    print("\n".join(task_names()))
    return 0


def _number(kind: type, low: float, high: float):
    """An argparse type: an int or a finite float within [low, high]; anything else is a usage error (exit 2)
    that names the flag, the range and what was given."""
    import argparse
    import math

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {'an integer' if kind is int else 'a number'}, "
                                             f"got {text!r}") from None
        if (kind is float and not math.isfinite(value)) or not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be between {low:g} and {high:g}, got {text!r}")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in its messages
    return parse


def _stop_timeout(p: argparse.ArgumentParser) -> None:
    from node.system.process import DEFAULT_STOP_TIMEOUT

    p.add_argument("--stop-timeout", type=_number(float, 0, 86400), default=DEFAULT_STOP_TIMEOUT,
                   help="seconds after SIGTERM / Ctrl-C within which the process ends, gracefully or not "
                        f"(default: {DEFAULT_STOP_TIMEOUT:.0f})")


EVAL_PEER_FLAGS = ("--model", "--task", "--seed", "--threads", "--backend")
LOCAL_FLAGS = ("--task", "--steps", "--transfer", "--backend", "--group-policy", "--group-size", "--prompts",
               "--eval-every")


def _output_arguments(p: argparse.ArgumentParser) -> None:
    from node.config import MAX_INT

    p.add_argument("--metrics", help="append one JSON line of metrics per step to this file")
    p.add_argument("--out", help="checkpoints (periodically and at a stop) and, at the end, the trained model, "
                   "resolved configuration and a reward plot go here; a run resumes from its newest valid "
                   "checkpoint here")
    p.add_argument("--metrics-port", type=_number(int, 0, 65535),
                   help="serve Prometheus metrics on this port (0: any free port; "
                   "default: off)")
    p.add_argument("--metrics-host", default="127.0.0.1", help="interface of the metrics endpoint (0.0.0.0 in "
                   "containers) (default: 127.0.0.1)")
    p.add_argument("--fresh", action="store_true", help="do not resume from --out's checkpoints (they are "
                   "moved aside, not deleted)")
    p.add_argument("--tensorboard", metavar="DIR", help="also log each step's figures to TensorBoard in DIR "
                   "(needs the tensorboard package)")
    p.add_argument("--log-every", type=_number(int, 1, MAX_INT), default=10,
                   help="steps between progress lines when not a tty "
                   "(default: 10)")


def flag_hint(parser, message: str) -> str:
    """For argparse's "unrecognized arguments: ...": the flags of the command line's subcommand (or any, when it
    names none) nearest to each unknown one, as "; did you mean --x?" ("" when none is near)."""
    import argparse
    import difflib

    if not message.startswith("unrecognized arguments: "):
        return ""
    commands = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
    parsers = [parser]
    if commands is not None:
        named = [commands.choices[a] for a in sys.argv[1:] if a in commands.choices]
        parsers += named[:1] or list(commands.choices.values())
    flags = sorted({o for p in parsers for a in p._actions for o in a.option_strings if o.startswith("--")})
    hints = []
    for unknown in message.removeprefix("unrecognized arguments: ").split():
        near = difflib.get_close_matches(unknown.split("=")[0], flags, n=2, cutoff=0.75) if unknown[:2] == "--" else []
        hints += [(unknown, " or ".join(near))] if near else []
    if len(hints) == 1:
        return f"; did you mean {hints[0][1]}?"
    return f"; did you mean {', '.join(f'{near} (for {unknown})' for unknown, near in hints)}?" if hints else ""


def build_parser() -> argparse.ArgumentParser:
    import argparse

    from node.app.local_swarm import LOCAL_DEFAULTS
    from node.config import CLIENT_FLAGS, EVAL_FLAGS, MAX_INT, NETWORK_FLAGS, PEER_FLAGS, add_config_arguments

    class Parser(argparse.ArgumentParser):
        """Usage mistakes as one line, like every other bad value (argparse prints the usage block first), with
        the nearest flags for a mistyped one."""

        def error(self, message: str):
            self.exit(EXIT_USAGE, f"swarm: error: {message}{flag_hint(self, message)} (see `{self.prog} --help`)\n")

    parser = Parser(prog="swarm", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)

    from node.observability.report import PROGRESS_COLUMNS

    raw = argparse.RawDescriptionHelpFormatter
    run = sub.add_parser("run", help="train one peer alone (no swarm)", epilog=PROGRESS_COLUMNS, formatter_class=raw)
    add_config_arguments(run, PEER_FLAGS)
    _output_arguments(run)
    _stop_timeout(run)
    run.add_argument("--shuffle-rewards", action="store_true", help="control run: permute rewards in each step")
    run.set_defaults(func=cmd_run)

    join = sub.add_parser("join", help="join a swarm and train with it until stopped", epilog=PROGRESS_COLUMNS,
                          formatter_class=raw)
    add_config_arguments(join, PEER_FLAGS + NETWORK_FLAGS + CLIENT_FLAGS, JOIN_DEFAULTS)
    _output_arguments(join)
    _stop_timeout(join)
    join.add_argument("--other-task", action="store_true",
                      help="train --task even where the swarm trains another (its groups and the swarm's are then "
                           "refused both ways: it learns alone); without it such a join stops with one line")
    join.add_argument("--join-attempts", type=_number(int, 0, MAX_INT), default=0,
                      help="tries to reach the swarm (0: until stopped) (default: 0)")
    join.add_argument("--initial-peers-file", help="read initial peers from this file (one multiaddr a line; "
                      "waits up to the start-up time-out for it to appear)")
    join.add_argument("--control-port", type=_number(int, -1, 65535), default=0,
                      help="control API port (0: any free, -1: off) (default: 0)")
    join.add_argument("--control-host", default="127.0.0.1", help="control API interface (default: 127.0.0.1)")
    _dashboard_arguments(join)
    join.set_defaults(func=cmd_join)

    boot = sub.add_parser("bootstrap", help="run a DHT-only bootstrap node")
    add_config_arguments(boot, NETWORK_FLAGS, BOOTSTRAP_DEFAULTS)
    _stop_timeout(boot)
    boot.add_argument("--status-every", type=_number(float, 0.1, 86400), default=30.0,
                      help="seconds between status lines (default: 30)")
    boot.add_argument("--address-file", help="also write the multiaddrs here (peers read it: --initial-peers-file)")
    boot.add_argument("--control-port", type=_number(int, -1, 65535), default=-1,
                      help="control API port (0: any free, -1: off) (default: -1)")
    _dashboard_arguments(boot)
    boot.set_defaults(func=cmd_bootstrap)

    local = sub.add_parser("local", help="a local swarm: bootstrap + heterogeneous zoo peers as processes; "
                           "the configuration applies to every peer")
    add_config_arguments(local, tuple(f for f in PEER_FLAGS if f.flag in LOCAL_FLAGS), LOCAL_DEFAULTS)
    local.add_argument("--peers", type=_number(int, 1, 64), default=4,
                       help="number of peers (models cycle through the zoo) "
                       "(default: 4)")
    local.add_argument("--models", help="comma-separated models to cycle through: zoo models, or the packaged "
                       "smollm2-135m and gemma3-270m (default: digit-sub,digit-add,digit-add-lora,digit-sub-bpe)")
    local.add_argument("--out", default="runs/local", help="logs, metrics, summary and plot go here "
                       "(default: runs/local)")
    local.set_defaults(func=cmd_local)

    status = sub.add_parser("status", help="ask a running node through its control API")
    status.add_argument("address", help="host:port of the node's control API")
    status.add_argument("--timeout", type=_number(float, 0.1, 3600), default=5.0)
    status.add_argument("--health", action="store_true", help="only the gRPC health check (exit 0 if SERVING)")
    status.set_defaults(func=cmd_status)

    evaluation = sub.add_parser("eval", help="held-out accuracy of a model (greedy and sampled pass@1)")
    add_config_arguments(evaluation, tuple(f for f in PEER_FLAGS if f.flag in EVAL_PEER_FLAGS) + EVAL_FLAGS)
    evaluation.add_argument("--json", action="store_true", help="print the scores as one JSON object")
    evaluation.set_defaults(func=cmd_eval)

    export = sub.add_parser("export", help="a trained peer's model as a Hugging Face-ready folder (weights or "
                            "merged LoRA, tokenizer, model card)")
    export.add_argument("source", help="a run's --out folder (or a checkpoint, or its model/ folder)")
    export.add_argument("target", help="the folder to write (must not exist or be empty)")
    export.add_argument("--push-to-hub", metavar="REPO", help="then upload it to this hub repository (needs the "
                        "hub and a token: huggingface-cli login or HF_TOKEN)")
    export.set_defaults(func=cmd_export)

    zoo = sub.add_parser("zoo", help="the offline model zoo: list what peers load, or rebuild it from its recipe",
                         description="Peers load the zoo weights shipped with swarm-node (checked against their "
                         "manifest), or those in SWARM_ZOO_DIR. `build` runs the pre-training recipe again.")
    zoo.add_argument("action", choices=["list", "build"])
    zoo.add_argument("--out", help="build: write the models and their MANIFEST.json here (SWARM_ZOO_DIR=DIR "
                     "then loads them)")
    zoo.add_argument("--check", action="store_true", help="build: compare the rebuild, tensor by tensor, with the "
                     "zoo in use; exit 1 unless identical")
    zoo.add_argument("--models", help="build: comma-separated models (default: every model with its own weights)")
    zoo.add_argument("--workers", type=_number(int, 1, 64), default=1,
                     help="build: models built at once, one process and one "
                     "core each (the weights do not depend on it; default: 1)")
    zoo.add_argument("--seed-offset", type=_number(int, 0, MAX_INT), default=0,
                     help="build: add this to every model's seeds (a zoo "
                     "as another machine might have built it) (default: 0)")
    zoo.set_defaults(func=cmd_zoo)

    policies = sub.add_parser("policies", help="list transfer policies (--transfer NAME): what a received group "
                                                "teaches")
    policies.set_defaults(func=cmd_policies)
    credit = sub.add_parser("credit", help="check signed receipts: what other peers trained on of a peer's groups",
                            description="A peer that joins with --out keeps the signed receipts naming it in "
                            "OUT/receipts.jsonl. `verify` checks each with its receiver's public key (in the "
                            "receipt, and it must own the receiver's peer id) and prints the credit, by receiver.")
    credit.add_argument("action", choices=["verify"])
    credit.add_argument("file", help="a receipts file (OUT/receipts.jsonl)")
    credit.set_defaults(func=cmd_credit)
    tasks = sub.add_parser("tasks", help="list task names")
    tasks.set_defaults(func=cmd_tasks)
    return parser


LONG_RUNNING = ("run", "join", "bootstrap", "local")  # commands that stop cleanly on SIGTERM / Ctrl-C


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    command = next((a for a in argv if not a.startswith("-")), "")  # (the only global option takes no value)
    stop = None
    if command in LONG_RUNNING:  # before any other import: from its first instant, a stop is never a traceback
        from node.system.process import StopSignal, stop_with_parent

        stop = StopSignal()
        stop_with_parent(stop)  # a child of `swarm local` stops when it dies, however it dies
    import logging

    args = build_parser().parse_args(argv)
    args.stop = stop
    if stop is not None and hasattr(args, "stop_timeout"):  # (a signal before this point counts from its arrival)
        stop.timeout = args.stop_timeout
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from node.errors import UNREACHABLE_ERRORS, USER_ERRORS, Stopped

    try:
        return args.func(args)
    except Stopped as err:  # a stop signal before the work began
        print(f"{args.command} stopped {err}", file=sys.stderr, flush=True)
        return 0
    except KeyboardInterrupt:  # a second Ctrl-C
        print(f"{args.command} interrupted", file=sys.stderr, flush=True)
        return 130
    except USER_ERRORS as err:
        print(f"swarm: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except UNREACHABLE_ERRORS as err:
        print(f"swarm: error: {err}", file=sys.stderr)
        return EXIT_UNREACHABLE
    except BrokenPipeError:  # whoever read our output stopped reading (`swarm status | head`): no traceback
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # (Python flushes stdout at exit)
        return 1


if __name__ == "__main__":
    sys.exit(main())
