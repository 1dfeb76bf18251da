"""Saved runs on disk: the checkpoint layout, manifests, verification and the newest valid checkpoint (what
loading a saved model needs; it imports nothing of the node: node/persistence/checkpoint.py writes and restores a
peer's state in this layout).

Layout inside an output directory (`--out`):

    checkpoints/step-000000120/      120 steps done; the next step is 120
        model/                       weights, or only the LoRA adapter, + tokenizer + swarm-model.json
        trainer.pt                   optimiser state and torch RNG states (torch.load(weights_only=True))
        state.json                   step, the task-order RNG, the group policy (SAGC), the reward history
        ledger.bin                   the used-group ledger: 16-byte digests of records already handled
        swarm-config.toml            the resolved configuration
        manifest.json                size and SHA-256 of every file above; written last
    model/, swarm-config.toml, reward.png   the final outputs of a run that ended

A checkpoint is written into a temporary folder beside the others (`.tmp-...`), every file flushed to disk,
the manifest last, then renamed into place (a rename is atomic on POSIX file systems): a kill at any moment
leaves either the previous set of checkpoints or the new one complete, plus at most a leftover temporary
folder, which is removed at the next start. A checkpoint whose manifest is missing, unreadable, or does not
match its files (a disk or copy that lost bytes) is skipped with one line, and the previous one is used.
Only the newest `keep` are kept, and an older one is deleted only after a newer one is complete.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

CHECKPOINTS = "checkpoints"  # inside an output directory


FORMAT = 1
MANIFEST = "manifest.json"
PREFIX = "step-"
TMP_PREFIX = ".tmp-"
DIGEST = 16  # bytes per ledger entry


def checkpoint_name(steps_done: int) -> str:
    return f"{PREFIX}{steps_done:09d}"


def checkpoint_step(path: Path) -> int | None:
    """Steps done in a checkpoint folder named step-N, else None."""
    digits = path.name[len(PREFIX):]
    return int(digits) if path.name.startswith(PREFIX) and digits.isdigit() else None


def file_sha256(path: Path) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_manifest(folder: Path, steps_done: int) -> None:
    """Flushes every file of `folder` to disk and writes the manifest of their sizes and checksums last."""
    files = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        _fsync(path)
        files[path.relative_to(folder).as_posix()] = {"size": path.stat().st_size, "sha256": file_sha256(path)}
    manifest = folder / MANIFEST
    manifest.write_text(json.dumps({"format": FORMAT, "step": steps_done, "files": files}, indent=1))
    _fsync(manifest)
    for sub in {folder, *(p for p in folder.rglob("*") if p.is_dir())}:
        _fsync(sub)


def verify(folder: Path) -> str | None:
    """Why a checkpoint folder cannot be used (one line), or None when every file matches its manifest."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
        files, step = manifest["files"], manifest["step"]
    except FileNotFoundError:
        return "no manifest (the write did not finish)"
    except (OSError, ValueError, KeyError, TypeError) as err:
        return f"unreadable manifest ({type(err).__name__})"
    if manifest.get("format") != FORMAT:
        return f"checkpoint format {manifest.get('format')!r}, this node reads {FORMAT}"
    if step != checkpoint_step(folder):
        return f"manifest says step {step}, the folder another"
    for required in ("state.json", "trainer.pt", "model/swarm-model.json"):
        if required not in files:
            return f"manifest lacks {required}"
    for name, entry in files.items():
        path = folder / name
        if not path.is_file():
            return f"{name} is missing"
        if path.stat().st_size != entry["size"]:
            return f"{name} has {path.stat().st_size} bytes, the manifest says {entry['size']}"
        if file_sha256(path) != entry["sha256"]:
            return f"{name} does not match its checksum"
    return None


@dataclass
class Found:
    path: Path | None = None  # the newest valid checkpoint
    step: int = 0  # steps done in it
    skipped: list[str] = field(default_factory=list)  # one line per newer checkpoint that was not valid


def checkpoints(out: Path) -> list[Path]:
    """Checkpoint folders in an output directory, newest first."""
    root = out / CHECKPOINTS
    found = [p for p in root.iterdir() if p.is_dir() and checkpoint_step(p) is not None] if root.is_dir() else []
    return sorted(found, key=checkpoint_step, reverse=True)


def latest_checkpoint(out: Path) -> Found:
    """The newest checkpoint whose files match its manifest; newer broken ones are listed in `skipped`."""
    found = Found()
    for path in checkpoints(out):
        reason = verify(path)
        if reason is None:
            found.path, found.step = path, checkpoint_step(path)
            return found
        found.skipped.append(f"checkpoint {path} skipped: {reason}")
    return found


def remove_unfinished(out: Path) -> list[Path]:
    """Deletes temporary folders of checkpoint and output writes that a kill interrupted; returns them."""
    stale = [p for folder in (out / CHECKPOINTS, out) if folder.is_dir()
             for p in folder.glob(TMP_PREFIX + "*") if p.is_dir()]
    for path in stale:
        shutil.rmtree(path, ignore_errors=True)
    return stale


def set_aside(out: Path) -> Path | None:
    """`--fresh`: moves existing checkpoints out of the way (renamed, never deleted); returns where."""
    root = out / CHECKPOINTS
    if not root.is_dir() or not any(root.iterdir()):
        return None
    target = out / f"{CHECKPOINTS}.before-{time.strftime('%Y%m%d-%H%M%S')}"
    root.rename(target)
    return target
