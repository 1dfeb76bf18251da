"""Where the zoo's weights live, and how a peer knows they are the ones the project measured.

Pre-training a zoo model (node/models/zoo.py) is seeded and repeatable on one machine, but not bit for bit
across CPUs: kernels round differently, and a zoo rebuilt elsewhere started at other accuracies (tiny-add
0.174 instead of 0.248 held-out greedy pass@1) and trained to other results. So the project ships the weights:
`zoo_weights/` beside this file holds one folder per model (config, safetensors, tokenizer) and MANIFEST.json,
which records each model's recipe hash, how it was built (seed offset, torch, CPU) and the SHA-256 of every
file. A peer loads a zoo model only after its files match the manifest.

`SWARM_ZOO_DIR` points peers at another folder of the same layout, written by `swarm zoo build --out DIR`
(the recipe run again, on this machine, optionally with other seeds: a stand-in for another machine's build);
`swarm zoo build --check` rebuilds and compares tensor by tensor with the zoo in use.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import hashlib
import json
import math
import multiprocessing
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from node.errors import ModelLoadError, first_line

from .zoo import ZOO, ZooSpec, recipe_hash, weights_spec

SHIPPED = Path(__file__).with_name("zoo_weights")
MANIFEST = "MANIFEST.json"
ZOO_ENV = "SWARM_ZOO_DIR"
MANIFEST_FORMAT = 1


def active_zoo() -> Path:
    """The zoo folder peers load from: $SWARM_ZOO_DIR when set, else the shipped weights."""
    chosen = os.environ.get(ZOO_ENV)
    return Path(chosen).expanduser() if chosen else SHIPPED


def is_shipped(folder: Path) -> bool:
    return folder.resolve() == SHIPPED.resolve()


def file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def read_manifest(folder: Path) -> dict:
    """The folder's manifest ({"format", "models": {name: entry}}); an empty one where there is none yet."""
    path = folder / MANIFEST
    if not path.exists():
        return {"format": MANIFEST_FORMAT, "models": {}}
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise ModelLoadError(f"zoo manifest {path} cannot be read: {first_line(err)}") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("models"), dict):
        raise ModelLoadError(f"zoo manifest {path} has no 'models' table")
    return manifest


def _where(folder: Path) -> str:
    return "the shipped zoo" if is_shipped(folder) else f"zoo folder {folder} ({ZOO_ENV})"


def damage(folder: Path, name: str, entry: dict) -> str:
    """What is wrong with a model's files against its manifest entry ("" when every file matches)."""
    files = entry.get("files")
    if not isinstance(files, dict) or "model.safetensors" not in files:
        return "its manifest entry lists no weights"
    for file, digest in sorted(files.items()):
        path = folder / name / file
        if not path.is_file():
            return f"{file} is missing"
        if file_digest(path) != digest:
            return f"{file} does not match its SHA-256 in {MANIFEST}"
    return ""


def zoo_model_path(name: str) -> Path:
    """The folder of zoo model `name` (a LoRA entry: its base's weights) in the active zoo, after checking its
    files against the manifest (once per process); ModelLoadError, in one line, when missing or damaged."""
    return _verified(str(active_zoo()), weights_spec(name).name)


@functools.cache
def _verified(root: str, name: str) -> Path:
    folder = Path(root)
    entry = read_manifest(folder)["models"].get(name)
    if entry is None:
        hint = ("reinstall swarm-node" if is_shipped(folder) else
                f"build it with `swarm zoo build --out {folder} --models {name}`")
        raise ModelLoadError(f"{_where(folder)} has no model {name!r}: {hint}")
    problem = damage(folder, name, entry)
    if problem:
        hint = ("reinstall swarm-node (or `git checkout node/models/zoo_weights`)" if is_shipped(folder) else
                f"rebuild it with `swarm zoo build --out {folder} --models {name}`")
        raise ModelLoadError(f"zoo model {name!r} in {_where(folder)} is damaged: {problem}; {hint}")
    return folder / name


# ---- building (the recipe, run again) ----------------------------------------------------------------------

def reseeded(spec: ZooSpec, seed_offset: int) -> ZooSpec:
    return dataclasses.replace(spec, seed=spec.seed + seed_offset) if seed_offset else spec


def buildable() -> list[str]:
    """The zoo entries that have weights of their own (a LoRA entry loads its base's)."""
    return [name for name, spec in ZOO.items() if not spec.base]


def machine() -> dict:
    """Where a build ran (provenance only: nothing compares it)."""
    import torch
    import transformers

    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        lines = []
    cpu = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), "")
    return {"torch": torch.__version__, "transformers": transformers.__version__,
            "python": platform.python_version(), "machine": platform.machine(), "cpu": cpu or platform.processor()}


def build_into(out: Path, spec: ZooSpec, seed_offset: int = 0,
               progress: Callable[[str, int, int, float], None] | None = None) -> dict:
    """Pre-trains one model from its recipe into out/<name> (replacing what was there) and returns its manifest
    entry; the folder's manifest is not touched (see build_zoo)."""
    from node.system.runtime import single_thread

    from .zoo import build_model

    built = reseeded(spec, seed_offset)
    step_cb = (lambda step, loss: progress(spec.name, step, spec.steps, loss)) if progress else None
    start = time.monotonic()
    with single_thread():  # (the recipe's numbers were measured on one thread)
        model, tokenizer, losses = build_model(built, step_cb)
    seconds = time.monotonic() - start
    out.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(dir=out, prefix=f".{spec.name}-"))
    scratch.chmod(0o755)  # (mkdtemp's 0700 would keep other users of a shared zoo folder out)
    try:
        model.save_pretrained(scratch)
        tokenizer.save_pretrained(scratch)
        files = {p.name: file_digest(p) for p in sorted(scratch.iterdir()) if p.is_file()}
        target = out / spec.name
        if target.exists():
            shutil.rmtree(target)
        scratch.rename(target)
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    return {"recipe": recipe_hash(built), "seed": built.seed, "seed_offset": seed_offset,
            "params": sum(p.numel() for p in model.parameters()),
            "final_loss": round(losses[-1], 6) if losses else None, "built_on": machine(),
            "build_seconds": round(seconds), "files": files}


def write_manifest(out: Path, entries: dict[str, dict]) -> Path:
    """Adds (or replaces) these models' entries in out's manifest, written atomically."""
    manifest = read_manifest(out)
    manifest["format"] = MANIFEST_FORMAT
    manifest["models"] = {**manifest["models"], **entries}
    manifest["models"] = {name: manifest["models"][name] for name in sorted(manifest["models"])}
    tmp = out / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    tmp.replace(out / MANIFEST)
    _verified.cache_clear()
    return out / MANIFEST


class BuildProgress:
    """Progress of zoo pre-training on stderr: a line when a model starts, then every tenth of its steps with
    the time left for it and, while models wait for a worker, for the whole build (if they take as long as
    this one). Picklable, so that build workers each print their own."""

    def __init__(self, models: int = 1, workers: int = 1):
        self.started: dict[str, float] = {}
        self.models, self.workers = models, max(workers, 1)

    def __call__(self, name: str, step: int, total: int, loss: float) -> None:
        if name not in self.started:
            self.started[name] = time.monotonic()
            print(f"pre-training zoo model {name} ({total} steps)", file=sys.stderr, flush=True)
        if step > 0 and (step == total or step % max(total // 10, 1) == 0):
            spent = time.monotonic() - self.started[name]
            left = spent * (total - step) / step
            line = f"  {name}: step {step}/{total} loss {loss:.3f}, {spent:.0f} s, ~{left:.0f} s left"
            waiting = self.models - self.workers - (len(self.started) - 1)  # models not yet started anywhere
            if waiting > 0 and step < total:
                whole = left + math.ceil(waiting / self.workers) * spent * total / step
                line += f" (the whole build ~{whole / 60:.0f} min if the {waiting} still waiting take as long)"
            print(line, file=sys.stderr, flush=True)


def build_zoo(out: Path, seed_offsets: dict[str, int],
              progress: Callable[[str, int, int, float], None] | None = None, workers: int = 1) -> Path:
    """Builds these models (name -> seed offset) into `out` and records each in its manifest once built (an
    interrupted build keeps what it finished). workers > 1: that many models at once, each in a process of its
    own on one thread (the weights are the same as built one after another); `progress` must then pickle."""
    if workers <= 1 or len(seed_offsets) <= 1:
        for name, offset in seed_offsets.items():
            write_manifest(out, {name: build_into(out, ZOO[name], offset, progress)})
        return out / MANIFEST
    context = multiprocessing.get_context("spawn")  # (no fork of a process that may hold torch threads)
    with concurrent.futures.ProcessPoolExecutor(min(workers, len(seed_offsets)), mp_context=context) as pool:
        jobs = {pool.submit(build_into, out, ZOO[name], offset, progress): name
                for name, offset in seed_offsets.items()}
        for job in concurrent.futures.as_completed(jobs):
            write_manifest(out, {jobs[job]: job.result()})
    return out / MANIFEST


# ---- comparing two builds ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class ModelDiff:
    name: str
    tensors: int  # tensors in the reference
    differing: int  # tensors whose values differ (or that one side lacks)
    max_abs: float  # largest |a - b| over the tensors both have
    worst: str  # the tensor where it is
    tokenizer_same: bool

    @property
    def identical(self) -> bool:
        return self.differing == 0 and self.tokenizer_same


def compare_models(reference: Path, other: Path, name: str) -> ModelDiff:
    """Tensor by tensor: how far `other`/<name> is from `reference`/<name>."""
    from safetensors.torch import load_file

    ref, new = load_file(reference / name / "model.safetensors"), load_file(other / name / "model.safetensors")
    differing, max_abs, worst = 0, 0.0, ""
    for key, tensor in ref.items():
        if key not in new or new[key].shape != tensor.shape:
            differing += 1
            continue
        if not tensor.equal(new[key]):
            differing += 1
            gap = float((tensor.double() - new[key].double()).abs().max())
            if gap > max_abs:
                max_abs, worst = gap, key
    differing += len(set(new) - set(ref))
    tokenizers = [(folder / name / "tokenizer.json").read_bytes() for folder in (reference, other)]
    return ModelDiff(name, len(ref), differing, max_abs, worst, tokenizers[0] == tokenizers[1])
