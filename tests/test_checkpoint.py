"""Checkpoints and resume, through the real CLI in subprocesses killed with SIGKILL: during steps, during a
checkpoint write, and with a checkpoint corrupted on disk. The reference is one uninterrupted run with the same
seed: a resumed run must end bit for bit where it ends."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from node.config import CheckpointConfig, build_config
from node.models.saved import checkpoint_name, latest_checkpoint, verify
from node.peer import Peer
from node.persistence.checkpoint import Checkpointer, resume_peer, save_checkpoint

ROOT = Path(__file__).resolve().parents[1]
STEPS, EVERY = 16, 4
RUN = ["run", "--model", "tiny-add", "--steps", str(STEPS), "--prompts", "8", "--seed", "3",
       "--checkpoint-every", str(EVERY), "--checkpoint-minutes", "0", "--keep-checkpoints", "100",
       "--set", "sagc.price_time=false"]  # (SAGC's default prices a size by measured seconds, which no two runs
#                                           share: a resumed run repeats every decision that reads no clock)
KILL_DURING_WRITE = """
import pathlib, sys, time
import node.persistence.checkpoint as c
write = c.write_manifest
def stalled(folder, step):
    if step == {step}:  # the model and trainer files are written; the manifest is not
        pathlib.Path({flag!r}).write_text(str(folder))
        time.sleep(600)
    write(folder, step)
c.write_manifest = stalled
import swarm_cli
sys.exit(swarm_cli.main(sys.argv[1:]))
"""


def swarm(*args, code=None):
    head = [sys.executable, "-c", code] if code else [sys.executable, str(ROOT / "swarm_cli.py")]
    return subprocess.Popen([*head, *args], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc, timeout=300):
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err
    return out, err


def wait_for(condition, what, limit=240.0):
    deadline = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def metric_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def same_rows(a: list[dict], b: list[dict]) -> bool:
    """Steps equal in everything a run decides (timings aside)."""
    keys = ("step", "reward", "group_size", "tokens")
    return all([r[k] for k in keys] + [r["loss"]["loss"], r["loss"]["grad_norm"]] ==
               [s[k] for k in keys] + [s["loss"]["loss"], s["loss"]["grad_norm"]] for r, s in zip(a, b, strict=True))


def same_weights(a: Path, b: Path) -> bool:
    wa, wb = load_file(a / "model.safetensors"), load_file(b / "model.safetensors")
    return wa.keys() == wb.keys() and all(wa[k].equal(wb[k]) for k in wa)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uninterrupted run: its outputs, every checkpoint (kept) and its metrics."""
    out = tmp_path_factory.mktemp("reference")
    finish(swarm(*RUN, "--out", str(out / "out"), "--metrics", str(out / "m.jsonl")))
    return out


def test_a_run_killed_during_steps_resumes_to_the_uninterrupted_result(reference, tmp_path):
    out, metrics = tmp_path / "out", tmp_path / "m.jsonl"
    proc = swarm(*RUN, "--out", str(out), "--metrics", str(metrics))
    wait_for(lambda: metrics.exists() and len(metrics.read_text().splitlines()) >= 10, "10 steps")
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    assert not (out / "model").exists()  # killed: no final outputs, only checkpoints
    found = latest_checkpoint(out)
    assert found.path is not None and found.skipped == [] and EVERY <= found.step < STEPS
    # the killed run's last checkpoint is the uninterrupted run's at that step, bit for bit
    ref_ckpt = reference / "out" / "checkpoints" / checkpoint_name(found.step)
    assert same_weights(found.path / "model", ref_ckpt / "model")
    for name in ("ledger.bin", "swarm-config.toml"):
        assert (found.path / name).read_bytes() == (ref_ckpt / name).read_bytes(), name
    state, ref_state = (json.loads((p / "state.json").read_text()) for p in (found.path, ref_ckpt))
    assert state.pop("time") != ref_state.pop("time") and state == ref_state  # only the wall clock differs
    trainer, ref_trainer = (torch.load(p / "trainer.pt", weights_only=True) for p in (found.path, ref_ckpt))
    assert torch.equal(trainer["torch_rng"], ref_trainer["torch_rng"])
    moments = [(s[k], ref_trainer["optimizer"]["state"][i][k]) for i, s in trainer["optimizer"]["state"].items()
               for k in s]
    assert moments and all(torch.equal(a, b) for a, b in moments)

    _, err = finish(swarm(*RUN, "--out", str(out), "--metrics", str(metrics)))
    assert f"resuming from {found.path} ({found.step} steps done" in err
    rows = metric_rows(metrics)
    assert [r["step"] for r in rows] == list(range(STEPS))  # the steps after the checkpoint were done again
    assert same_rows(rows, metric_rows(reference / "m.jsonl"))
    assert same_weights(out / "model", reference / "out" / "model")


def test_a_kill_during_a_checkpoint_write_leaves_the_previous_one_in_use(reference, tmp_path):
    out, flag = tmp_path / "out", tmp_path / "writing"
    proc = swarm(*RUN, "--out", str(out), code=KILL_DURING_WRITE.format(step=2 * EVERY, flag=str(flag)))
    wait_for(flag.exists, "the stalled checkpoint write")
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    partial = Path(flag.read_text())
    assert partial.is_dir() and (partial / "model" / "model.safetensors").exists()
    assert not (partial / "manifest.json").exists()
    assert not (out / "checkpoints" / checkpoint_name(2 * EVERY)).exists()  # never renamed into place
    assert latest_checkpoint(out).step == EVERY

    _, err = finish(swarm(*RUN, "--out", str(out)))
    assert f"removed an unfinished write (checkpoints/{partial.name})" in err
    assert f"({EVERY} steps done" in err
    assert not partial.exists()
    assert same_weights(out / "model", reference / "out" / "model")


def test_a_corrupt_checkpoint_is_reported_in_one_line_and_the_previous_one_used(reference, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(reference / "out", out)
    shutil.rmtree(out / "model")
    newest = out / "checkpoints" / checkpoint_name(STEPS)
    weights = newest / "model" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])  # a disk that lost bytes
    older = out / "checkpoints" / checkpoint_name(STEPS - EVERY)
    state = older / "state.json"
    state.write_text(state.read_text().replace('"step": 12', '"step": 13'))  # same size, other bytes
    _, err = finish(swarm(*RUN, "--out", str(out)))
    skipped = [line for line in err.splitlines() if "skipped" in line]
    size = (reference / "out" / "checkpoints" / checkpoint_name(STEPS) / "model" / "model.safetensors").stat().st_size
    assert skipped == [f"checkpoint {newest} skipped: model/model.safetensors has 1000 bytes, the manifest says {size}",
                       f"checkpoint {older} skipped: state.json does not match its checksum"]
    assert f"({STEPS - 2 * EVERY} steps done" in err
    assert same_weights(out / "model", reference / "out" / "model")


def test_fresh_sets_checkpoints_aside_and_starts_at_step_zero(reference, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(reference / "out", out)
    _, err = finish(swarm(*RUN[:3], "--steps", "2", *RUN[5:], "--out", str(out), "--fresh"))
    moved = [p for p in out.iterdir() if p.name.startswith("checkpoints.before-")]
    assert len(moved) == 1 and f"earlier checkpoints moved to {moved[0]}" in err
    assert len(list(moved[0].iterdir())) == STEPS // EVERY  # nothing deleted
    assert "resuming" not in err and latest_checkpoint(out).step == 2


def scrape(port: int) -> dict[str, float]:
    """Samples of a Prometheus endpoint, by name and labels."""
    from urllib.request import urlopen

    from prometheus_client.parser import text_string_to_metric_families

    text = urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read().decode()
    return {s.name + "".join(f",{k}={v}" for k, v in sorted(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_sigterm_ends_the_step_and_writes_a_checkpoint(tmp_path):
    """An unbounded run with a Prometheus endpoint: scraped while it trains, then SIGTERM: the step ends, a
    checkpoint and the outputs are written, exit 0."""
    out, metrics = tmp_path / "out", tmp_path / "m.jsonl"
    proc = swarm(*RUN[:3], "--steps", "0", *RUN[5:], "--checkpoint-every", "0", "--out", str(out),
                 "--metrics", str(metrics), "--metrics-port", "0", "--eval-every", "2",
                 "--set", "eval.prompts=8")
    wait_for(lambda: metrics.exists() and len(metrics.read_text().splitlines()) >= 3, "3 steps")
    port = int(next(line for line in iter(proc.stderr.readline, "") if "Prometheus metrics on" in line)
               .rsplit(":", 1)[1].split("/")[0])
    samples = scrape(port)
    assert samples["swarm_steps_total"] >= 3 and 0 <= samples["swarm_reward"] <= 1
    assert samples["swarm_group_size"] in (4, 8, 12, 16) and samples["swarm_step_seconds"] > 0
    assert 0 <= samples["swarm_accuracy,kind=greedy,split=train"] <= 1  # evaluated after step 2
    assert samples["swarm_groups_sent_total"] == 0 and samples["swarm_peers"] == 0  # alone
    assert samples["swarm_peer_info,model=tiny-add,swarm=default"] == 1
    proc.send_signal(signal.SIGTERM)
    _, err = finish(proc, timeout=120)
    done = len(metric_rows(metrics))
    assert f"checkpoint after step {done}" in err and latest_checkpoint(out).step == done
    assert "/0 " not in err  # an unbounded run shows its step alone
    assert (out / "model" / "swarm-model.json").exists()


def test_a_resumed_peer_holds_the_checkpoint_state_bit_for_bit(tmp_path):
    """In process: parameters, optimiser moments, task-order RNG, SAGC state and torch RNG after a resume are
    those that were saved (full fine-tuning and LoRA)."""
    for lora in (False, True):
        cfg = build_config({"model": {"name": "tiny-add", "lora": lora}, "train": {"prompts_per_step": 4}})
        peer = Peer(cfg)
        for step in range(3):
            peer.step(step)
        saved = save_checkpoint(peer, tmp_path / str(lora), 3, keep=2, history={"curve": [0.5]})
        assert verify(saved) is None
        again = resume_peer(cfg, saved)
        assert again.start_step == 3 and again.history == {"curve": [0.5]} and again.loaded.lora == lora
        a, b = dict(peer.loaded.model.named_parameters()), dict(again.loaded.model.named_parameters())
        assert a.keys() == b.keys() and all(a[k].equal(b[k]) for k in a)
        opt_a, opt_b = peer.learner.optimizer.state_dict(), again.learner.optimizer.state_dict()
        assert opt_a["param_groups"] == opt_b["param_groups"]
        for i, s in opt_a["state"].items():
            assert all(torch.equal(s[k], opt_b["state"][i][k]) for k in s)
        assert peer.rng.getstate() == again.rng.getstate()
        assert peer.policy.state_dict() == again.policy.state_dict()
        assert peer.step(3).reward == again.step(3).reward


def test_checkpointer_timing_keeps_the_newest_and_survives_a_failed_write(tmp_path, monkeypatch):
    cfg = build_config({"model": {"name": "tiny-add"}, "train": {"prompts_per_step": 2}})
    peer = Peer(cfg)
    now = [0.0]
    ck = Checkpointer(peer, tmp_path, CheckpointConfig(every=3, minutes=1.0, keep=2), dict, clock=lambda: now[0])
    assert [ck.due(s) for s in (1, 2, 3)] == [False, False, True]
    written = [s for s in range(1, 8) if ck.after_step(s)]
    assert written == [3, 6]
    now[0] = 61.0  # a minute later: due by time at any step
    assert ck.after_step(7) is not None
    assert [p.name for p in sorted((tmp_path / "checkpoints").iterdir())] == [checkpoint_name(6), checkpoint_name(7)]
    assert ck.save(7) is None  # this step's checkpoint exists already

    def full_disk(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("node.persistence.checkpoint.write_state", full_disk)
    assert ck.save(8) is None  # one warning, training goes on
    monkeypatch.undo()

    def torch_full_disk(*args, **kwargs):  # how torch.save says it
        raise RuntimeError("[enforce fail at inline_container.cc:664] . unexpected pos 64 vs 0")

    monkeypatch.setattr(torch, "save", torch_full_disk)
    assert ck.save(9) is None
    assert not [p for p in (tmp_path / "checkpoints").iterdir() if p.name.startswith(".tmp-")]
    assert latest_checkpoint(tmp_path).step == 7


def test_model_from_an_output_keeps_its_learning_rate(tmp_path, sampled_groups):
    """--model <output dir> for a full and a LoRA output, and for an output whose run was killed (only
    checkpoints): the saved weights, and the learning rate that trained them."""
    full = tmp_path / "full"
    finish(swarm("run", "--model", "tiny-add", "--steps", "2", "--prompts", "4", "--lr", "5e-4", "--out", str(full)))
    lora = tmp_path / "lora"
    finish(swarm("run", "--model", "tiny-add-lora", "--steps", "2", "--prompts", "4", "--out", str(lora)))
    for where, is_lora, lr in ((full, False, 5e-4), (lora, True, 1e-3), (full / "checkpoints" / checkpoint_name(2),
                                                                         False, 5e-4)):
        peer = Peer(build_config({"model": {"name": str(where)}, "train": {"prompts_per_step": 2}}))
        assert peer.loaded.source == "saved" and peer.loaded.lora == is_lora
        assert peer.learning_rate() == lr and peer.learner.optimizer.param_groups[0]["lr"] == lr
        assert peer.step(0).tokens > 0  # it generates and takes a step
        groups = sampled_groups(peer.backend, peer.loaded.tokenizer, peer.cfg.task.name, 2, 4)
        assert peer.learner.step(groups).grad_norm > 0  # and trains (on a signal built in, whatever it sampled)
    saved = load_file(full / "model" / "model.safetensors")
    peer = Peer(build_config({"model": {"name": str(full)}}))
    assert all(saved[k].equal(p) for k, p in peer.loaded.model.state_dict().items() if k in saved)
    shutil.rmtree(full / "model")  # a killed run: only checkpoints
    assert Peer(build_config({"model": {"name": str(full)}})).loaded.source == "saved"
    os.remove(full / "checkpoints" / checkpoint_name(2) / "manifest.json")
    out = subprocess.run([sys.executable, str(ROOT / "swarm_cli.py"), "run", "--model", str(full), "--steps", "1"],
                         capture_output=True, text=True, cwd=ROOT, timeout=300, check=False)
    assert out.returncode == 2 and out.stderr.strip().splitlines() == [
        f"swarm: error: {str(full)!r} holds no model and no valid checkpoint (checkpoint "
        f"{full / 'checkpoints' / checkpoint_name(2)} skipped: no manifest (the write did not finish))"]


def test_an_earlier_version_output_loads_its_model_not_its_settings(tmp_path, tiny):
    """Outputs of the previous layout: out/model (weights, no swarm-model.json) beside out/config.json, which
    held the run's settings and was mistaken for a model config."""
    from node.config import ModelConfig
    from node.models.loading import load_model

    tiny[0].save_pretrained(tmp_path / "model")
    tiny[1].save_pretrained(tmp_path / "model")
    (tmp_path / "config.json").write_text(json.dumps({"model": {"name": "tiny-add"}, "train": {"steps": 3}}))
    loaded = load_model(ModelConfig(name=str(tmp_path)))
    assert loaded.source == "local" and loaded.base == str((tmp_path / "model").resolve())
    saved = load_file(tmp_path / "model" / "model.safetensors")
    assert all(saved[k].equal(p) for k, p in loaded.model.state_dict().items() if k in saved)
