"""The results store: the JSON files of finished runs under --out, read back and selected by section, pair, cell
and seed (older runs' labels and settings read as today's)."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

from bench.experiments.grid import MIXED, PAIRS, ROOT, RUN_SECTIONS, SWARM_VARIANTS

LEGACY_LABELS = {"outcome": "success-gated", "F-TIS-gated": "verified-imitation", "F-TIS+baseline":
                 "imitation, floor 0", "F-TIS-gated-f2": "imitation, floor 2"}  # a cell's name before the transfer


#                                                                                  policies had names
LEGACY_SETTINGS = {"loss.g": "transfer.g", "loss.divergence": "transfer.divergence", "loss.trunc_c":
                   "transfer.trunc_c", "loss.foreign_rows": "transfer.foreign_rows", "loss.harm_bound":
                   "trust.harm_bound"}


def current_run(run: dict) -> dict:
    """A run recorded before the transfer policies had names (its `variant` and loss settings) as the same rule
    is named now; a rule no policy is (received_floor without the greedy baseline: 'F-TIS+floor') keeps a
    policy name of its own, which no cell asks for."""
    if "variant" not in run:
        return run
    settings = dict(map(tuple, run["settings"]))
    greedy = settings.pop("swarm.received_baseline", "sender") == "greedy"
    floor = float(settings.pop("loss.received_floor", "0"))
    policy = {"outcome": "success-gated"}.get(run["variant"], run["variant"])
    if greedy:
        policy = "verified-imitation"
        if floor != 1.0:
            settings["transfer.floor"] = run_value(floor)
    elif floor:
        policy = "retired:f-tis+floor"
    if settings.pop("loss.received_weights", "token") == "sequence":
        settings["transfer.sequence_weights"] = "true"
    settings = {LEGACY_SETTINGS.get(k, k): v for k, v in settings.items()}
    out = {k: v for k, v in run.items() if k != "variant"}
    return {**out, "policy": policy, "settings": [list(kv) for kv in settings.items()],
            "label": LEGACY_LABELS.get(run.get("label", ""), run.get("label", ""))}


def run_value(x: float) -> str:
    return str(int(x)) if x == int(x) else str(x)


def load(out: Path) -> dict[str, dict]:
    """The experiments' results (not the report's own files beside them, e.g. verdict.json), runs recorded under
    earlier names as they are named now."""
    found = {p.stem: json.loads(p.read_text()) for p in out.glob("*.json") if p.stem.split("_")[0] in RUN_SECTIONS}
    return {stem: {**res, "run": current_run(res["run"])} for stem, res in found.items()
            if isinstance(res, dict) and "run" in res}


def peer_runs(results: dict, section: str, models: tuple[str, ...], policy: str, settings=()) -> dict:
    """{seed: {model: peer log}} of the matching runs."""
    out: dict[int, dict] = {}
    for res in results.values():
        run = res["run"]
        if (run["section"] == section and tuple(run["models"]) == tuple(models) and run["policy"] == policy
                and tuple(map(tuple, run["settings"])) == tuple(settings)):
            out[run["seed"]] = {log["model"]: log for log in res["peers"].values()}
    return out


def alone_runs_in(results: dict, section: str, model: str) -> dict[int, dict]:
    return {seed: logs[model] for seed, logs in peer_runs(results, section, (model,), "alone").items()}


def alone_runs(results: dict, model: str) -> dict[int, dict]:
    return alone_runs_in(results, "ftis", model)


def verdict_runs(results: dict, pair: tuple[str, str], label: str) -> dict[int, dict]:
    """{seed: {model: peer log}} of one cell of a verdict pair (an Alone cell gathers each model's own runs)."""
    out: dict[int, dict] = {}
    for res in results.values():
        run = res["run"]
        if run["section"] != "verdict" or run["label"] != label:
            continue
        if tuple(run["models"]) == tuple(pair) or (len(run["models"]) == 1 and run["models"][0] in pair):
            for log in res["peers"].values():
                out.setdefault(run["seed"], {})[log["model"]] = log
    return {seed: logs for seed, logs in out.items() if set(logs) == set(pair)}


def ran_pairs(results: dict) -> dict[str, tuple[str, str]]:
    """The pairs with at least one swarm run (an invocation may run some pairs only)."""
    return {name: pair for name, pair in PAIRS.items()
            if any(peer_runs(results, "ftis", pair, v) for v in SWARM_VARIANTS)}


def mixed_runs(results: dict, name: str, label: str) -> dict[int, dict]:
    """{seed: {model: peer log}} of one policy's runs in one mixed-tokenizer swarm."""
    out: dict[int, dict] = {}
    for res in results.values():
        run = res["run"]
        if run["section"] == "mixed" and tuple(run["models"]) == MIXED[name] and run["label"] == label:
            out[run["seed"]] = {log["model"]: log for log in res["peers"].values()}
    return out


RESULTS_DATA = "docs/results"  # what the benchmarks write (raw runs, the pages' figures): not the code they ran


def source_commit(root: Path = ROOT) -> str:
    """The checkout's commit, "-dirty" when its tracked files differ from it outside RESULTS_DATA: what a run
    records as its provenance (a benchmark rewrites its page's figures there, which says nothing of the code)."""
    head = subprocess.run(["git", "rev-parse", "--short=7", "HEAD"], capture_output=True, text=True, cwd=root)
    if head.returncode != 0:
        return "unknown"
    changed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".",
                              f":(exclude){RESULTS_DATA}"], capture_output=True, text=True, cwd=root)
    return head.stdout.strip() + ("-dirty" if changed.stdout.strip() else "")
