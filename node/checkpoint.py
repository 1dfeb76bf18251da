"""Checkpoints: a peer's whole training state on disk, written so that no kill can leave a half one in use.

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
import logging
import os
import random
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from .config import CheckpointConfig, write_config
from .errors import first_line
from .models.loading import CHECKPOINTS, save_model

if TYPE_CHECKING:
    from .peer import Peer

log = logging.getLogger(__name__)

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


# ---- what a peer's state is ----------------------------------------------------------------------------
def _rng_state(rng: random.Random) -> list:
    version, internal, gauss = rng.getstate()
    return [version, list(internal), gauss]


def _set_rng_state(rng: random.Random, state: list) -> None:
    version, internal, gauss = state
    rng.setstate((version, tuple(internal), gauss))


def write_state(peer: Peer, folder: Path, steps_done: int, history: dict) -> None:
    """Every part of a peer's training state, as files in `folder` (no manifest)."""
    import torch

    save_model(peer.loaded, folder / "model", peer.learning_rate())
    trainer = {"optimizer": peer.learner.optimizer.state_dict(), "torch_rng": torch.get_rng_state(),
               "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []}
    torch.save(trainer, folder / "trainer.pt")
    ledger = list(peer.exchange.seen) if peer.exchange is not None else []
    (folder / "ledger.bin").write_bytes(b"".join(k for k in ledger if len(k) == DIGEST))
    state = {"format": FORMAT, "step": steps_done, "rng": _rng_state(peer.rng), "policy": peer.policy.state_dict(),
             "history": history, "model": peer.loaded.base, "lora": peer.loaded.lora, "time": time.time()}
    (folder / "state.json").write_text(json.dumps(state))
    write_config(peer.cfg, folder / "swarm-config.toml")


def restore_state(peer: Peer, folder: Path) -> tuple[int, dict]:
    """Loads a verified checkpoint's optimiser, RNG, policy and ledger into a peer built from its model
    folder; returns (steps done, reward history)."""
    import torch

    state = json.loads((folder / "state.json").read_text())
    trainer = torch.load(folder / "trainer.pt", weights_only=True)
    peer.learner.optimizer.load_state_dict(trainer["optimizer"])
    for group in peer.learner.optimizer.param_groups:  # the rate of this run's configuration (by default, the
        group["lr"] = peer.learning_rate()              # saved one: swarm-model.json)
    torch.set_rng_state(trainer["torch_rng"])
    if trainer["cuda_rng"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(trainer["cuda_rng"])
    _set_rng_state(peer.rng, state["rng"])
    peer.policy.load_state_dict(state["policy"])
    if peer.exchange is not None and (folder / "ledger.bin").exists():
        raw = (folder / "ledger.bin").read_bytes()
        for i in range(0, len(raw) - DIGEST + 1, DIGEST):
            peer.exchange.seen.add(raw[i:i + DIGEST])
    return int(state["step"]), state.get("history", {})


def save_checkpoint(peer: Peer, out: Path, steps_done: int, keep: int, history: dict) -> Path:
    """Writes a checkpoint atomically, then deletes all but the newest `keep`; returns its folder."""
    root = out / CHECKPOINTS
    root.mkdir(parents=True, exist_ok=True)
    final = root / checkpoint_name(steps_done)
    tmp = Path(tempfile.mkdtemp(prefix=f"{TMP_PREFIX}{final.name}-", dir=root))
    try:
        write_state(peer, tmp, steps_done, history)
        write_manifest(tmp, steps_done)
        if final.exists():  # the same step again (a run resumed and stopped at once): the new one replaces it
            shutil.rmtree(final)
        tmp.rename(final)
        _fsync(root)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    for old in checkpoints(out)[keep:]:
        shutil.rmtree(old, ignore_errors=True)
    return final


class Checkpointer:
    """Decides when to checkpoint (every N steps, every M minutes, at a stop) and never lets a failed write
    (a full disk) end the run: it is one warning line, and training goes on."""

    def __init__(self, peer: Peer, out: Path, cfg: CheckpointConfig, history: Callable[[], dict],
                 steps_done: int = 0, clock: Callable[[], float] = time.monotonic):
        self.peer, self.out, self.cfg, self.history, self.clock = peer, out, cfg, history, clock
        self.last_step, self.last_time = steps_done, clock()

    def due(self, steps_done: int) -> bool:
        by_steps = self.cfg.every > 0 and steps_done % self.cfg.every == 0
        by_time = self.cfg.minutes > 0 and self.clock() - self.last_time >= self.cfg.minutes * 60
        return steps_done > self.last_step and (by_steps or by_time)

    def after_step(self, steps_done: int) -> Path | None:
        return self.save(steps_done) if self.due(steps_done) else None

    def save(self, steps_done: int) -> Path | None:
        """A checkpoint now (unless this step's is written already); None when it could not be written."""
        if steps_done <= self.last_step:
            return None
        try:
            path = save_checkpoint(self.peer, self.out, steps_done, self.cfg.keep, self.history())
        except (OSError, RuntimeError) as err:  # torch.save reports a full disk as a RuntimeError
            log.warning("checkpoint at step %d not written (%s); training goes on", steps_done,
                        getattr(err, "strerror", None) or first_line(err))
            return None
        self.last_step, self.last_time = steps_done, self.clock()
        return path


def save_outputs(peer: Peer, out: Path) -> Path:
    """The final model (weights or adapter, tokenizer, swarm-model.json) as `out/model`, replaced whole (a
    new one is written beside it and renamed over), and the resolved configuration as `out/swarm-config.toml`."""
    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f"{TMP_PREFIX}model-", dir=out))
    try:
        save_model(peer.loaded, tmp / "model", peer.learning_rate())
        write_config(peer.cfg, tmp / "swarm-config.toml")
        target, old = out / "model", out / f"{TMP_PREFIX}old-model"
        if target.exists():
            shutil.rmtree(old, ignore_errors=True)
            target.rename(old)
        (tmp / "model").rename(target)
        (tmp / "swarm-config.toml").replace(out / "swarm-config.toml")
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out / "model"
