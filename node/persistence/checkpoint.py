"""A peer's whole training state as a checkpoint (node/models/saved.py: the layout, written so that no kill can
leave a half one in use), restored into a peer to go on from it; the final outputs of a run."""
from __future__ import annotations

import json
import logging
import random
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from node.config import CheckpointConfig, NodeConfig, write_config
from node.errors import first_line
from node.models.loading import save_model, trained_on
from node.models.saved import (
    CHECKPOINTS,
    DIGEST,
    FORMAT,
    TMP_PREFIX,
    _fsync,
    checkpoint_name,
    checkpoints,
    write_manifest,
)

if TYPE_CHECKING:
    from node.peer import Peer

log = logging.getLogger(__name__)


def _rng_state(rng: random.Random) -> list:
    version, internal, gauss = rng.getstate()
    return [version, list(internal), gauss]


def _set_rng_state(rng: random.Random, state: list) -> None:
    version, internal, gauss = state
    rng.setstate((version, tuple(internal), gauss))


def write_state(peer: Peer, folder: Path, steps_done: int, history: dict) -> None:
    """Every part of a peer's training state, as files in `folder` (no manifest)."""
    import torch

    save_model(peer.loaded, folder / "model", peer.learning_rate(),
               trained_with(peer, steps_done, history.get("last_eval", {})))
    trainer = {"optimizer": peer.learner.optimizer.state_dict(), "torch_rng": torch.get_rng_state(),
               "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []}
    torch.save(trainer, folder / "trainer.pt")
    ledger = list(peer.exchange.seen) if peer.exchange is not None else []
    (folder / "ledger.bin").write_bytes(b"".join(k for k in ledger if len(k) == DIGEST))
    state = {"format": FORMAT, "step": steps_done, "rng": _rng_state(peer.rng), "policy": peer.policy.state_dict(),
             "history": history, "model": peer.loaded.base, "lora": peer.loaded.lora, "time": time.time(),
             "given": list(peer.exchange.credit.given.items()) if peer.exchange is not None else []}  # credit we give
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
    if peer.exchange is not None:  # the credit we announce goes on from where it was (oldest first)
        for peer_id, groups in state.get("given", []):
            peer.exchange.credit.given[str(peer_id)] = int(groups)
    if peer.exchange is not None and (folder / "ledger.bin").exists():
        raw = (folder / "ledger.bin").read_bytes()
        for i in range(0, len(raw) - DIGEST + 1, DIGEST):
            peer.exchange.seen.add(raw[i:i + DIGEST])
    return int(state["step"]), state.get("history", {})


def resume_peer(cfg: NodeConfig, point: Path | None, **kwargs) -> Peer:
    """A peer for `cfg` (kwargs: Peer's), and, given a verified checkpoint folder, its model and training state
    from it: it goes on at `peer.start_step` with its reward history in `peer.history`."""
    from node.peer import Peer

    peer = Peer(cfg, resume=point, **kwargs)
    if point is not None:
        peer.start_step, peer.history = restore_state(peer, point)
    return peer


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


def trained_with(peer: Peer, steps_done: int, accuracy: dict) -> dict:
    """swarm-model.json's record of how this peer's model was trained (node/models/loading.py trained_on)."""
    cfg = peer.cfg
    swarm = peer.exchange is not None
    return trained_on(cfg.task, cfg.eval, steps_done, accuracy, cfg.swarm.name if swarm else "",
                      cfg.transfer.policy if swarm else "")


def save_outputs(peer: Peer, out: Path, steps_done: int = 0, accuracy: dict | None = None) -> Path:
    """The final model (weights or adapter, tokenizer, swarm-model.json) as `out/model`, replaced whole (a
    new one is written beside it and renamed over), and the resolved configuration as `out/swarm-config.toml`;
    `steps_done` and the last held-out `accuracy` go into swarm-model.json."""
    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f"{TMP_PREFIX}model-", dir=out))
    try:
        save_model(peer.loaded, tmp / "model", peer.learning_rate(), trained_with(peer, steps_done, accuracy or {}))
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
