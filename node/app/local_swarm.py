"""`swarm local`: a bootstrap node and N heterogeneous zoo peers as separate processes on loopback.

The same entry points as the docker compose swarm (`swarm bootstrap`, `swarm join`), as local processes.
Shows the peers' progress while they train (a live table on a terminal, a line a minute in a log), stops
everything on Ctrl-C or SIGTERM at any moment (SIGTERM to each child by PID; SIGKILL to any still running when
its own stop time-out has passed), and writes a summary of each peer's reward (summary.json and rewards.png)
into the output folder.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from node.config import NodeConfig, is_config_variable, write_config
from node.errors import ConfigError, Stopped
from node.metrics import StepResult, read_metrics
from node.models.packaged import PACKAGED, prepare
from node.models.zoo import ZOO
from node.models.zoo_store import zoo_model_path
from node.observability.report import (
    accuracy_change,
    accuracy_over_time,
    alone_reference,
    evaluations,
    held_out_auc,
    plot_curves,
    window_mean,
)
from node.system.process import PARENT_ENV, StopSignal, kill_pids

# the digits testbed: a borrows expert and a carries expert (each lacks the other's skill), the carries expert
# through LoRA, and a carries expert in the char tokenizer (token ids of its own: cross-tokenizer F-TIS)
DEFAULT_MODELS = ("digit-sub-bpe", "digit-add-bpe", "digit-add-bpe-lora", "digit-add")
# `swarm local`'s own defaults (below the user's file, environment and flags): several processes share 2 cores
# here, so a quarter of the default prompts a step; zoo sequences are short and 4 vLLM engines share the RAM.
# The settings of bench/experiments/results.py's section 0, so its Alone runs are the summary's reference
LOCAL_DEFAULTS = {"train": {"steps": 150, "prompts_per_step": 8}, "swarm": {"received_groups": 8},
                  "generation": {"vllm_kv_cache_gib": 0.25}, "eval": {"every": 25},
                  "task": {"name": "digits"}}  # sums and differences: each expert has something to teach
CLI = str(Path(__file__).resolve().parents[2] / "swarm_cli.py")
CHILD_STOP_GRACE = 30.0  # seconds a child has to stop after SIGTERM before it is killed (its own time-out: 20)


def accuracy_points(rows: list[StepResult]) -> list[list[float]]:
    """[steps done, held-out ID accuracy] at every evaluation of a peer's run, the one before training included."""
    return [[steps_done, acc] for r in rows for steps_done, acc, _ in evaluations(r) if acc is not None]


def swarm_cpu(rows: list[StepResult]) -> dict:
    """The swarm's own CPU in a peer's steps after the first (which waits for the others), means a step: a step's
    CPU in all, and of it the sharing on the main thread, the network thread's and the network daemon's (read in
    clock ticks: a step's is often 0, so means, not medians), and their sum's share of the steps' CPU."""
    rows = [r for r in rows[1:] if r.cpu_seconds > 0]
    if not rows:
        return {}
    parts = {"cpu_sharing": [r.swarm.cpu_seconds for r in rows],
             "cpu_network": [r.swarm.network_cpu_seconds for r in rows],
             "cpu_daemon": [r.swarm.daemon_cpu_seconds for r in rows]}
    total = sum(r.cpu_seconds for r in rows)
    return {"cpu_step": total / len(rows), **{k: sum(v) / len(rows) for k, v in parts.items()},
            "swarm_cpu_share": sum(map(sum, parts.values())) / total}


def peer_summary(rows: list[StepResult]) -> dict:
    rewards = [r.reward for r in rows]
    rejected: dict[str, int] = {}
    for r in rows:
        for reason, n in r.swarm.rejected.items():
            rejected[reason] = rejected.get(reason, 0) + n
    return {
        "steps": len(rows),
        "reward_first": window_mean(rewards, head=True),
        "reward_last": window_mean(rewards, head=False),
        "reward_start": sum(rewards[:3]) / len(rewards[:3]) if rows else 0.0,  # (nearly) before any update
        "reward_end": sum(rewards[-25:]) / len(rewards[-25:]) if rows else 0.0,
        "groups_received": sum(r.swarm.groups_received for r in rows),  # decoded, first time
        "groups_used": sum(r.swarm.groups_used for r in rows),  # trained on (a group of equal rewards teaches nothing)
        "steps_with_received": sum(1 for r in rows if r.swarm.groups_received > 0),
        "steps_with_used": sum(1 for r in rows if r.swarm.groups_used > 0),
        "alone_at_end": alone_at_end(rows),
        "rejected": rejected,
        "mean_group_size": sum(r.group_size for r in rows) / len(rows) if rows else 0.0,
        "max_peers_seen": max((r.swarm.peers for r in rows), default=0),
        "accuracy_start": rows[0].eval_before if rows else {},  # held-out pass@1 before training
        "accuracy_curve": accuracy_points(rows),
        "accuracy": next((r.eval for r in reversed(rows) if r.eval), {}),  # the last evaluation
        **swarm_cpu(rows),
        "auc": held_out_auc([r.eval["train/greedy"] for r in rows if "train/greedy" in r.eval])  # ID, after step 0
        if any("train/greedy" in r.eval for r in rows) else None,
    }


def reference_settings(cfg: NodeConfig) -> dict:
    """The settings an Alone reference must share with this run (node/observability/report.py REFERENCE_KEYS)."""
    return {"task": cfg.task.name, "steps": cfg.train.steps, "eval_every": cfg.eval.every,
            "prompts_per_step": cfg.train.prompts_per_step, "eval_prompts": cfg.eval.prompts}


def alone_line(model: str, auc: float, cfg: NodeConfig) -> str:
    """'held-out ID AUC 0.41 in the swarm vs 0.35 alone (mean of 6 Alone runs, which ranged 0.33-0.37, sd 0.01;
    ...)', or why there is no Alone figure to compare."""
    ref = alone_reference(model, reference_settings(cfg))
    if ref is None:
        return (f"held-out ID AUC {auc:.3f} in the swarm (no Alone reference for {model} with these settings: "
                "bench/experiments/results.py --sections verdict measures one)")
    aucs = [a for a in ref.get("aucs", []) if isinstance(a, (int, float))]
    spread = (f", which ranged {min(aucs):.3f}-{max(aucs):.3f}, sd {statistics.stdev(aucs):.3f}"
              if len(aucs) >= 2 else "")
    where = ("" if len(aucs) < 2 else ": above every one" if auc > max(aucs) else
             ": below every one" if auc < min(aucs) else ": within their range")
    return (f"held-out ID AUC {auc:.3f} in the swarm vs {ref['auc']:.3f} alone (mean of {ref['seeds']} Alone runs"
            f"{spread}{where}; bench/experiments/results.py section 0)")


def alone_at_end(rows: list[StepResult]) -> int:
    """The steps at the end of a peer's run with no other peer present (the others had finished, or left)."""
    n = 0
    for r in reversed(rows):
        if r.swarm.peers:
            break
        n += 1
    return n if n < len(rows) else 0  # (a peer that never met another is not "left alone at the end")


def wait_for_address(proc: subprocess.Popen, timeout: float, lines: list[str] | None = None,
                     stop: threading.Event | None = None) -> str:
    """The first 'bootstrap address:' line the bootstrap prints (its stdout is a pipe); every line it prints
    is appended to `lines`, if given, as it comes. Stopped when `stop` is set meanwhile."""
    found: list[str] = []

    def reader():
        for line in proc.stdout:
            if lines is not None:
                lines.append(line.rstrip("\n"))
            if line.startswith("bootstrap address:") and not found:
                found.append(line.split(":", 1)[1].strip())

    threading.Thread(target=reader, daemon=True).start()
    deadline = time.monotonic() + timeout
    while not found and time.monotonic() < deadline and proc.poll() is None:
        if stop is not None and stop.is_set():
            raise Stopped("while starting the bootstrap node")
        time.sleep(0.1)
    if not found:
        raise ConfigError("the local bootstrap node did not start (see its log)")
    return found[0]


def stop_all(procs: list[subprocess.Popen], grace: float = CHILD_STOP_GRACE) -> None:
    """SIGTERM to each child we started (by PID), then SIGKILL to those still running after `grace`."""
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace
    for proc in procs:
        try:
            proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class SwarmProcesses:
    """A bootstrap and `swarm join` peers as processes on loopback, each with a log (and a metrics file):
    the entry points of docker compose, as `swarm local`, the hostile-peer tests and bench/attacks/catalogue.py use
    them. Every process is started here and ended here, by its PID."""

    def __init__(self, out: Path, env: dict[str, str] | None = None):
        """env: the processes' environment (default: ours)."""
        self.out = Path(out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.env = {**(os.environ if env is None else env), "PYTHONUNBUFFERED": "1",
                    PARENT_ENV: str(os.getpid())}  # they stop when we die, even by kill -9
        self.bootstrap: subprocess.Popen | None = None
        self.bootstrap_lines: list[str] = []  # what the bootstrap printed (addresses, status lines)
        self.peers: dict[str, subprocess.Popen] = {}
        self.address = ""

    def start_bootstrap(self, *extra: str, port: int = 0, timeout: float = 90,
                        stop: threading.Event | None = None) -> str:
        with open(self.out / "bootstrap.log", "a" if self.bootstrap else "w") as log:  # a restart appends
            self.bootstrap = subprocess.Popen(
                [sys.executable, CLI, "bootstrap", "--port", str(port), "--status-every", "10",
                 "--identity", str(self.out / "bootstrap.id"), *extra],
                stdout=subprocess.PIPE, stderr=log, text=True, env=self.env)
        self.address = wait_for_address(self.bootstrap, timeout, self.bootstrap_lines, stop)
        return self.address

    def start_peer(self, name: str, *args: str, wrap: tuple[str, ...] = ()) -> subprocess.Popen:
        """`swarm join` through the bootstrap, with metrics in <name>.jsonl and identity <name>.id; `wrap`
        prefixes the command (e.g. `ip netns exec NS`, which execs it under the same PID)."""
        (self.out / f"{name}.jsonl").unlink(missing_ok=True)
        cmd = [*wrap, sys.executable, CLI, "join", "--initial-peers", self.address,
               "--metrics", self.metrics_path(name), "--identity", str(self.out / f"{name}.id"),
               "--log-every", "1000000", *args]
        with open(self.out / f"{name}.log", "a" if name in self.peers else "w") as log:  # a restart appends
            self.peers[name] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=self.env)
        return self.peers[name]

    def metrics_path(self, name: str) -> str:
        return str(self.out / f"{name}.jsonl")

    def metrics(self, name: str) -> list[StepResult]:
        return read_metrics(self.metrics_path(name))

    def log_tail(self, name: str, lines: int = 15) -> str:
        path = self.out / f"{name}.log"
        return "\n".join(path.read_text().splitlines()[-lines:]) if path.exists() else ""

    def processes(self) -> list[subprocess.Popen]:
        return [*self.peers.values(), *([self.bootstrap] if self.bootstrap is not None else [])]

    def stop(self) -> None:
        stop_all(list(self.peers.values()))
        if self.bootstrap is not None:
            stop_all([self.bootstrap])


class StepRate:
    """Each peer's measured step rate, from when we first saw it past its first step until now (our clock): what
    the time left is estimated from (a window of a few steps swings with evaluations and a busy CPU)."""

    def __init__(self):
        self.first: dict[str, tuple[float, int]] = {}  # peer -> (when, steps done) at its first sighting

    def see(self, name: str, steps_done: int, now: float) -> None:
        if steps_done >= 1 and name not in self.first:
            self.first[name] = (now, steps_done)

    def seconds_left(self, done: dict[str, int], total: int, now: float) -> float | None:
        """The slowest peer's steps to go at its measured rate; None until every unfinished peer has a rate."""
        left = [0.0]
        for name, steps in done.items():
            if steps >= total:
                continue
            since, at = self.first.get(name, (now, steps))
            if steps - at < 2 or now <= since:
                return None
            left.append((total - steps) * (now - since) / (steps - at))
        return max(left)


def live_table(names: list[str], runs: dict[str, list[StepResult]], codes: dict[str, int | None], total: int,
               head: str):
    """The terminal's live table (rich): one row a peer, redrawn in place."""
    from rich.table import Table

    table = Table(title=head, title_justify="left", expand=False)
    for column, justify in (("peer", "left"), ("step", "right"), ("reward", "right"), ("G", "right"),
                            ("received", "right"), ("peers", "right"), ("rejected", "right"), ("", "left")):
        table.add_column(column, justify=justify)
    for name in names:
        rows, code = runs[name], codes.get(name)
        state = "starting" if not rows else "running" if code is None else "done" if code == 0 else f"exit {code}"
        if not rows:
            table.add_row(name, "-", "-", "-", "-", "-", "-", state)
            continue
        last, recent = rows[-1], [r.reward for r in rows[-10:]]
        table.add_row(name, f"{last.step + 1}" + (f"/{total}" if total else ""), f"{sum(recent) / len(recent):.3f}",
                      str(last.group_size), str(last.swarm.groups_used), str(last.swarm.peers),
                      str(sum(last.swarm.rejected.values())),
                      state if state != "running" or last.swarm.peers else "running, alone")
    return table


def one_line(names: list[str], runs: dict[str, list[StepResult]], head: str) -> str:
    """A period's report when the output is not a terminal: every peer on one line."""
    parts = []
    for name in names:
        rows = runs[name]
        if not rows:
            parts.append(f"{name} starting")
            continue
        recent = [r.reward for r in rows[-10:]]
        parts.append(f"{name} step {rows[-1].step + 1} reward {sum(recent) / len(recent):.3f} "
                     f"peers {rows[-1].swarm.peers}")
    return f"{head} " + "; ".join(parts)


def peer_configs(cfg: NodeConfig, models: list[str], n: int) -> dict[str, NodeConfig]:
    """Peer i runs model i (cycling: zoo or packaged) with seed cfg.train.seed + i; everything else is `cfg`."""
    out = {}
    for i in range(n):
        model = models[i % len(models)]
        out[f"peer{i}-{model}"] = dataclasses.replace(
            cfg, model=dataclasses.replace(cfg.model, name=model),
            train=dataclasses.replace(cfg.train, seed=cfg.train.seed + i))
    return out


def watch(swarm: SwarmProcesses, names: list[str], total: int, started: float, stop: StopSignal) -> None:
    """Shows the peers' progress until they end or we are stopped: on a terminal one live table redrawn in place
    every 2 s (rich); otherwise one line a minute. The time left is the slowest peer's, at its measured rate."""
    from rich.console import Console
    from rich.live import Live

    tty, rate = sys.stderr.isatty(), StepRate()
    every, shown_at = (2 if tty else 60), -math.inf

    def report() -> tuple[dict, str]:
        now = time.monotonic()
        runs = {name: swarm.metrics(name) for name in names}
        done = {name: len(rows) for name, rows in runs.items()}
        for name, steps in done.items():
            rate.see(name, steps, now)
        left = rate.seconds_left(done, total, now) if total else None
        finished = bool(total) and all(steps >= total for steps in done.values())
        head = (f"[{now - started:.0f} s" + (", every peer done" if finished else
                                             f", about {max(left / 60, 1):.0f} min left" if left is not None
                                             else ", estimating the time left" if total else "") + "]")
        return runs, head

    live = Live(console=Console(stderr=True), auto_refresh=False, transient=False) if tty else None
    try:
        if live is not None:
            live.start()
        while any(p.poll() is None for p in swarm.peers.values()) and not stop.event.wait(0.5):
            if time.monotonic() - shown_at < every:  # (the peers' end is seen within 0.5 s)
                continue
            shown_at = time.monotonic()
            runs, head = report()
            if live is not None:
                codes = {name: swarm.peers[name].poll() for name in names}
                live.update(live_table(names, runs, codes, total, head), refresh=True)
            else:
                print(one_line(names, runs, head), file=sys.stderr, flush=True)
        if live is not None:  # the last state, every peer's end included
            runs, head = report()
            live.update(live_table(names, runs, {n: swarm.peers[n].poll() for n in names}, total, head),
                        refresh=True)
    finally:
        if live is not None:
            live.stop()


def run_local(args, cfg: NodeConfig, stop: StopSignal) -> int:
    """args: peers, models, out; cfg: every peer's configuration (resolved by the CLI, LOCAL_DEFAULTS below
    the user's); stop: SIGTERM / Ctrl-C. Each peer gets its resolved configuration as a TOML file,
    <out>/<peer>.toml."""
    from node.rl.transfer.registry import build_policy
    from node.system.runtime import quiet_libraries
    from node.tasks import checks_work, get_task

    models = [m.strip() for m in args.models.split(",")] if args.models else list(DEFAULT_MODELS)
    for model in models:
        if model not in ZOO and model not in PACKAGED:
            raise ConfigError(f"local: {model!r} is neither a zoo model nor a packaged real model "
                              f"(known: {', '.join((*ZOO, *PACKAGED))})")
    if args.peers < 1:
        raise ConfigError(f"local: --peers must be >= 1, got {args.peers}")
    task = get_task(cfg.task.name, cfg.task.data_files)  # an unknown task is one line here, not four peer logs
    build_policy(cfg.transfer, checks_work(task))  # as is an unknown transfer policy or setting
    if cfg.generation.backend == "vllm":  # so is a missing vLLM
        from node.generation.vllm_backend import import_vllm

        import_vllm()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    quiet_libraries()
    for model in models:  # a missing or damaged zoo model or package: one line here, not four peer logs
        zoo_model_path(model) if model in ZOO else prepare(model)
    configs = peer_configs(cfg, models, args.peers)
    # the files hold the resolved configuration, environment included: the peers do not read it again
    swarm = SwarmProcesses(out, env={k: v for k, v in os.environ.items() if not is_config_variable(k)})
    names = list(configs)
    # the children stop themselves within their own stop time-out; ours covers them stopping one after another
    stop.timeout = 2 * CHILD_STOP_GRACE + 15
    stop.on_force.append(lambda: kill_pids(p.pid for p in swarm.processes() if p.poll() is None))
    started = time.monotonic()
    try:
        stop.check()
        print(f"bootstrap at {swarm.start_bootstrap(stop=stop.event)}", file=sys.stderr, flush=True)
        for name, peer_cfg in configs.items():
            stop.check()
            swarm.start_peer(name, "--config", str(write_config(peer_cfg, out / f"{name}.toml")),
                             "--join-attempts", "5")
        print(f"{len(names)} peers started; logs, metrics and configurations in {out}/ (Ctrl-C stops "
              f"everything)", file=sys.stderr, flush=True)
        watch(swarm, names, cfg.train.steps, started, stop)
    except Stopped as err:
        print(f"local swarm stopped {err}", file=sys.stderr, flush=True)
    finally:
        if stop.event.is_set() and swarm.processes():
            print("\nstopping the local swarm", file=sys.stderr, flush=True)
        swarm.stop()
    if not swarm.peers:  # stopped before any peer started: nothing to sum up
        return 0
    curves, references, summary = {}, {}, {}
    for name in names:
        rows = swarm.metrics(name)
        summary[name] = peer_summary(rows)
        curves[name] = summary[name]["accuracy_curve"]
        ref = alone_reference(configs[name].model.name, reference_settings(configs[name]))
        references[name] = ref.get("curve", []) if ref else []
    written = [out / "summary.json"]
    written[0].write_text(json.dumps(summary, indent=1))
    if any(curves.values()):
        written.append(plot_curves(curves, out / "accuracy.png", "local swarm: held-out accuracy "
                                   "(dashed: the same model alone)", references))
    print(f"local swarm summary ({time.monotonic() - started:.0f} s):")
    for name, s in summary.items():
        print(f"  {name:<22} steps {s['steps']:>4}  reward {s['reward_first']:.3f} -> {s['reward_last']:.3f}  "
              f"groups received {s['groups_received']} (trained on {s['groups_used']})  "
              f"rejected {sum(s['rejected'].values())}")
        if s["accuracy"]:
            print(f"  {'':<22} held-out accuracy: {accuracy_change(s['accuracy_start'], s['accuracy'])}")
            print(f"  {'':<22} held-out ID over time: "
                  f"{accuracy_over_time([[step, acc, None] for step, acc in s['accuracy_curve']])}")
        if s["auc"] is not None:
            print(f"  {'':<22} {alone_line(configs[name].model.name, s['auc'], configs[name])}")
        if s["alone_at_end"]:
            print(f"  {'':<22} trained its last {s['alone_at_end']} steps alone (no other peer present: the "
                  f"others had finished)")
    print(f"  written: {', '.join(map(str, written))}")
    codes = [p.returncode for p in swarm.peers.values()]
    return 0 if stop.event.is_set() or all(code == 0 for code in codes) else 1
