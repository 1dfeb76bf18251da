"""Running one experiment (`Run`): its peers in one process sharing through the in-process swarm; its result one
JSON file, and where it ran (`provenance`)."""
from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

from bench.experiments.grid import BASE, DIGITS_BASE, SECTION_TITLES, Run, peer_seed


def peer_config(run: Run, model: str, scale: dict):
    from node.config import build_config, merge

    base = DIGITS_BASE if run.section == "verdict" else BASE
    values = merge(base, {"model": {"name": model}, "transfer": {"policy": run.policy},
                          "train": {"steps": run.steps, "seed": peer_seed(run.seed, model)},
                          "eval": {"every": run.eval_every}})
    values = merge(values, scale)
    for key, value in run.settings:  # "section.field", or "model/section.field" for one model of the run
        target, _, key = key.rpartition("/")
        if target and target != model:
            continue
        section, name = key.split(".")
        if value.startswith("x"):  # a multiple of the value so far (e.g. Alone-2x's prompts, smoke scale too)
            value = str(int(float(value[1:]) * float(values[section][name])))
        values = merge(values, {section: {name: value}})
    return build_config(values)


def run_peers(run: Run, scale: dict) -> tuple[list[str], list]:
    """The run's peers ("model#i"), sharing through one in-memory swarm where the run is a swarm."""
    from node.peer import Peer
    from node.swarm.memory import MemorySwarm

    hub = MemorySwarm() if len(run.models) > 1 and run.policy != "alone" else None
    names = [f"{model}#{i}" for i, model in enumerate(run.models)]
    return names, [Peer(peer_config(run, model, scale), transport=hub.transport(name) if hub else None)
                   for model, name in zip(run.models, names, strict=True)]


def execute(run: Run, scale: dict, after=None) -> dict:
    """Runs one experiment in this process; returns, per peer, its curves and evaluations. `after(names, peers)`,
    if given, sees the trained peers before they close (e.g. to read their models)."""
    import torch

    from node.system.runtime import quiet_libraries

    quiet_libraries()
    torch.set_num_threads(1)
    from node.app.local_swarm import reference_settings

    names, peers = run_peers(run, scale)
    log = {name: {"model": p.cfg.model.name, "reward": [], "step_seconds": [], "learn_seconds": [],
                  "received": [], "foreign": [], "rejected": [], "received_reward": [], "filtered": [],
                  "group_size": [], "straggler": [], "gated": [], "floored": [], "distrusted": [], "evidence": [],
                  "demoted": [], "harm": [], "alignment": [], "anchors": [], "evals": [],
                  "settings": reference_settings(p.cfg)}  # what an Alone reference must share (report.py)
           for name, p in zip(names, peers, strict=True)}
    slow = run.cost / run.steps >= 20  # e.g. SmolLM2: a line now and then, so a long run shows progress
    try:
        for step in range(run.steps):
            if slow and step and step % 5 == 0:
                print(f"  {run.key}: step {step}/{run.steps}", flush=True)
            for name, peer in zip(names, peers, strict=True):  # the first takes the other's previous step
                r = peer.step(step)
                entry = log[name]
                if r.eval_before:  # the first step measures the weights before any update
                    entry["evals"].append({"step": 0, "seconds": 0.0, **r.eval_before})
                entry["reward"].append(r.reward)
                entry["step_seconds"].append(r.step_seconds)
                entry["learn_seconds"].append(r.learn_seconds)
                entry["received"].append(r.swarm.groups_used)
                entry["foreign"].append(r.swarm.foreign_used)
                entry["rejected"].append(sum(r.swarm.rejected.values()))
                entry["received_reward"].append(r.swarm.received_reward)
                entry["filtered"].append(r.loss.filtered_frac)
                entry["group_size"].append(r.group_size)
                entry["straggler"].append(r.group.straggler_rate)
                entry["gated"].append(r.swarm.gated)
                entry["floored"].append(r.loss.floored)
                entry["distrusted"].append(r.loss.distrusted)  # honest partners: never (node/rl/transfer/guard.py)
                entry["evidence"].append(r.swarm.evidence)
                entry["demoted"].append(r.swarm.demoted)  # senders demoted after the step (node/rl/alignment.py)
                entry["harm"].append(r.swarm.harm)
                entry["anchors"].append(r.loss.anchors)  # the harm detector's reference: 0 our rows, else anchors
                entry["alignment"].append(r.swarm.alignments)  # peer -> cosine with our own groups' gradient
                if r.eval:
                    entry["evals"].append({"step": step + 1, "seconds": sum(entry["step_seconds"]), **r.eval})
        if after is not None:
            after(names, peers)
    finally:
        for peer in peers:
            peer.close()
    return log


def run_one(run: Run, out: str, scale: dict, provenance: dict) -> tuple[str, float]:
    """Worker: executes a run unless its result exists; writes the result atomically, with the commit and
    command that produced it (a report may gather sections run at different commits)."""
    path = Path(out) / f"{run.key}.json"
    if path.exists():
        return run.key, 0.0
    start = time.perf_counter()
    peers = execute(run, scale)
    seconds = time.perf_counter() - start
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"run": dataclasses.asdict(run), "seconds": seconds, "peers": peers, **provenance}))
    tmp.replace(path)
    return run.key, seconds


def provenance(out: Path, results: dict) -> list[str]:
    """Which command at which commit produced each section's experiments (a rerun of one section leaves the
    others' results, and their provenance, as they were)."""
    rows: dict = {}
    for section, res, seconds in [(r["run"]["section"], r, r["seconds"]) for r in results.values()]:
        run = res["run"]
        key = (section, res.get("commit", "unrecorded"), res.get("command", "unrecorded"))
        row = rows.setdefault(key, {"n": 0, "seconds": 0.0, "steps": set(), "seeds": set(), "every": set()})
        row["n"] += 1
        row["seconds"] += seconds
        row["steps"].add(run["steps"])
        row["seeds"].add(run["seed"])
        row["every"].add(run["eval_every"])
    lines = ["| section | experiments | steps | seeds | evaluated every | compute minutes | commit | command |",
             "|---|---|---|---|---|---|---|---|"]
    order = list(SECTION_TITLES)
    for (section, commit, command), row in sorted(rows.items(), key=lambda kv: order.index(kv[0][0])):
        steps, every = ("/".join(str(x) for x in sorted(row[k])) for k in ("steps", "every"))
        lines.append(f"| {SECTION_TITLES[section]} | {row['n']} | {steps} | {len(row['seeds'])} | {every} steps | "
                     f"{row['seconds'] / 60:.0f} | {commit} | `{command}` |")
    return [*lines, ""]
