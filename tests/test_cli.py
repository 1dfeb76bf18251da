"""CLI: user errors are one line and a non-zero exit; --help does not import torch."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def swarm(*args, env=None):
    return subprocess.run([sys.executable, str(ROOT / "swarm_cli.py"), *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=300, env=env, check=False)


@pytest.mark.parametrize("args, message", [
    (["run", "--model", "./no/such/model"], "model './no/such/model' is not a zoo name"),
    (["run", "--task", "nope"], "unknown task 'nope'"),
    (["run", "--set", "loss.eps_std=-1"], "loss.eps_std must be > 0"),
    (["run", "--transfer", "f-tsi"], "transfer.policy 'f-tsi' is not a transfer policy"),
    (["run", "--transfer", "nois", "--set", "transfer.g=5"], "transfer.g is not a setting of policy nois"),
    (["run", "--set", "loss.variant=nois"], "loss.variant has moved: use transfer.policy"),
    (["run", "--steps", "many"], "train.steps must be an integer"),
    (["run", "--config", "/no/such.toml"], "does not exist"),
    (["join", "--port", "http"], "swarm.port must be an integer"),
    (["bootstrap", "--set", "swarm.name=a/b"], "swarm.name must be non-empty without '/'"),
    (["bootstrap", "--config", "/no/such.toml"], "does not exist"),
    (["local", "--task", "nope", "--out", "{out}"], "unknown task 'nope'"),
    (["local", "--transfer", "bogus", "--out", "{out}"], "transfer.policy 'bogus' is not a transfer policy"),
    (["local", "--models", "tiny-add,gpt-9", "--out", "{out}"], "'gpt-9' is neither a zoo model nor a packaged"),
    # the address a volunteer pastes, checked before anything starts (once, these retried the daemon for ever)
    (["join", "--initial-peers", "garbage"], "--initial-peers 'garbage' is not a multiaddr (it must begin with /)"),
    (["join", "--initial-peers", "127.0.0.1:31330"], "did you mean /ip4/127.0.0.1/tcp/31330/p2p/<peer id>?"),
    (["join", "--initial-peers", "/ip4/127.0.0.1/tcp/9/p2p/QmNotAPeerId"], "its /p2p/ part is not a peer id"),
    (["join", "--initial-peers", "/ip4/127.0.0.1/tcp/9"], "names no peer id"),
    (["join", "--initial-peers-file", "{addresses}"], "--initial-peers-file {addresses}: 'localhost:4000' is "
                                                       "host:port"),
    (["bootstrap", "--announce", "1.2.3.4:5"], "--announce '1.2.3.4:5' is host:port, not a multiaddr: did you mean "
                                                "/ip4/1.2.3.4/tcp/5?"),
    # absurd numbers and usage mistakes: one line too (argparse's usage block is not printed)
    (["run", "--steps", "99999999999999999999999"], "train.steps must be at most 2147483647"),
    (["run", "--set", "loss.eps_high=inf"], "loss.eps_high must be a finite number"),
    (["join", "--metrics-port", "99999"], "argument --metrics-port: must be between 0 and 65535, got '99999'"),
    (["join", "--stop-timeout", "nan"], "argument --stop-timeout: must be between 0 and 86400"),
    (["local", "--peers", "0", "--out", "{out}"], "argument --peers: must be between 1 and 64, got '0'"),
    (["eval", "--lora"], "unrecognized arguments: --lora"),
    (["run", "--no-such-flag"], "unrecognized arguments: --no-such-flag (see"),
    (["run", "--promts", "4"], "unrecognized arguments: --promts 4; did you mean --prompts? (see `swarm --help`)"),
    (["join", "--stesp", "2", "--promtps", "3"], "did you mean --steps (for --stesp), "
                                                 "--prompts (for --promtps)?"),
    (["status", "localhost"], "'localhost' names no port: expected HOST:PORT"),
    # an address the machine does not have: once retried for ever (issue 55, 6); 192.0.2.1 is TEST-NET-1
    (["join", "--host", "192.0.2.1", "--control-port", "-1", "--steps", "1"], "--host (swarm.host): '192.0.2.1' is "
                                                                               "not an address this machine can "
                                                                               "listen on"),
    (["join", "--dashboard-port", "0", "--dashboard-host", "192.0.2.1", "--control-port", "-1"],
     "--dashboard-port: '192.0.2.1' is not an address this machine can listen on"),
    # a mistyped model, before the swarm is joined (issue 55, 6: once, after 44-95 s of joining)
    (["join", "--model", "tiny-ad", "--control-port", "-1"], "and not a directory with a config.json; did you "
                                                             "mean 'tiny-add'?"),
])
def test_bad_input_is_one_clear_line(args, message, tmp_path):
    addresses = tmp_path / "addresses.txt"
    addresses.write_text("localhost:4000\n")
    out = swarm(*[a.format(out=tmp_path / "local", addresses=addresses) for a in args])
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    message = message.format(addresses=addresses)
    assert len(lines) == 1 and message in lines[0] and lines[0].startswith("swarm: error:"), out.stderr
    assert "Traceback" not in out.stderr
    assert not (tmp_path / "local").exists()  # `local` wrote nothing: no summary, no plot claimed


@pytest.mark.parametrize("args, message", [
    (["run", "--task", "gsm8k"], "task 'gsm8k' needs the dataset 'openai/gsm8k': the hub cannot be reached from "
                                 "here and it is not cached; offline, give a local copy"),
    (["run", "--task", "math500", "--set", "task.data_files=/no/such.jsonl"],
     "task.data_files '/no/such.jsonl' (for task 'math500') is not a file"),
    (["join", "--model", "swarm-node-tests/no-such-model", "--join-attempts", "1", "--control-port", "-1"],
     "model 'swarm-node-tests/no-such-model' (the hub cannot be reached from here; only a cached copy would do) "
     "could not be loaded"),
    (["eval", "--model", "swarm-node-tests/no-such-model"], "model 'swarm-node-tests/no-such-model' (the hub"),
])
def test_an_unreachable_hub_is_one_line_at_once(args, message, tmp_path):
    """No hub (an endpoint nobody answers on): a hub dataset or model that is not cached is one line, before
    any model is built and without the hub client's retries and warnings."""
    env = {**os.environ, "HF_ENDPOINT": "http://127.0.0.1:9", "HF_HOME": str(tmp_path / "hf")}
    env.pop("HF_HUB_OFFLINE", None)
    out = swarm(*args, env=env)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"swarm: error: {message}"), out.stderr


def test_a_top_level_toml_key_is_reported_as_what_it_is(tmp_path):
    config = tmp_path / "peer.toml"
    config.write_text("steps = 3\n[model]\nname = \"tiny-add\"\n")
    out = swarm("run", "--config", str(config))
    assert out.returncode == 2 and out.stderr.strip().splitlines() == [
        "swarm: error: configuration key 'steps' is not inside a section: every field belongs to one; "
        "did you mean [train] steps = ...?"]


def test_help_shows_the_defaults_of_the_configuration():
    out = swarm("join", "--help")
    text = " ".join(out.stdout.split())  # argparse wraps lines
    for expected in ("--lr VALUE learning rate", "(default: 0.0)", "--steps VALUE training steps (0: until "
                     "stopped) (default: 0)", "--group-size VALUE completions per prompt (G) under --group-policy "
                     "fixed (default: 8)", "--port VALUE DHT TCP port (0: any free port) (default: 0)"):
        assert expected in text, expected
    boot = " ".join(swarm("bootstrap", "--help").stdout.split())
    assert "(default: 31330)" in boot and "--model" not in boot


@pytest.mark.parametrize("args, message", [
    (["run", "--model", "Qwen/Qwen2.5-0.5B-Instruct"], "(HF_HUB_OFFLINE is set; only a cached copy would do) could "
                                                       "not be loaded"),
    (["run", "--task", "gsm8k"], "'openai/gsm8k': HF_HUB_OFFLINE is set and it is not cached"),
])
def test_offline_mode_is_named_as_the_reason(args, message, tmp_path):
    """The user's own HF_HUB_OFFLINE is named as such, not as a hub that cannot be reached."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    out = swarm(*args, env=env)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], out.stderr


def test_corrupt_checkpoint_is_one_line(tmp_path, tiny):
    model, tok = tiny
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])  # truncated file
    out = swarm("run", "--model", str(tmp_path))
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1 and "could not be loaded" in lines[0], out.stderr
    (tmp_path / "config.json").write_text("{not json")
    out = swarm("run", "--model", str(tmp_path))
    assert out.returncode == 2 and "not a valid JSON" in out.stderr and "Traceback" not in out.stderr


def test_help_is_light():
    code = "import sys, swarm_cli; swarm_cli.build_parser(); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60,
                         check=False)
    assert out.stdout.strip() == "False"


def test_run_prints_a_summary(tmp_path):
    out = swarm("run", "--steps", "3", "--prompts", "4", "--metrics", str(tmp_path / "m.jsonl"),
                "--out", str(tmp_path / "ckpt"), "--tensorboard", str(tmp_path / "tb"), "--eval-every", "2",
                "--set", "eval.prompts=8")
    assert out.returncode == 0, out.stderr
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from node.metrics import read_metrics

    board = EventAccumulator(str(tmp_path / "tb"))
    board.Reload()
    rows = read_metrics(tmp_path / "m.jsonl")
    assert [(e.step, e.value) for e in board.Scalars("reward")] == [(r.step + 1, pytest.approx(r.reward))
                                                                    for r in rows]
    accuracy = [(e.step, e.value) for e in board.Scalars("accuracy/train_greedy")]  # before training, 2, 3
    assert [step for step, _ in accuracy] == [0, 2, 3]
    assert accuracy[0][1] == pytest.approx(rows[0].eval_before["train/greedy"])
    assert accuracy[-1][1] == pytest.approx(rows[-1].eval["train/greedy"])
    assert "reward, first 1 step " in out.stdout and "reward, last 1 step " in out.stdout  # never overlapping
    assert re.search(r"learner passes of at most [\d,]+ padded tokens \(automatic\)", out.stderr), out.stderr
    assert len((tmp_path / "m.jsonl").read_text().splitlines()) == 3
    assert (tmp_path / "ckpt" / "model" / "swarm-model.json").exists()
    assert (tmp_path / "ckpt" / "swarm-config.toml").exists() and not (tmp_path / "ckpt" / "config.json").exists()
    assert (tmp_path / "ckpt" / "reward.png").read_bytes()[:4] == b"\x89PNG"


def test_an_unwritable_out_is_refused_before_any_training(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    for command in ("run", "join"):
        out = swarm(command, "--steps", "1", "--out", str(blocker / "sub"))
        assert out.returncode == 2, out.stderr
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"swarm: error: --out '{blocker / 'sub'}' is not writable")
        assert "Traceback" not in out.stderr and "step" not in out.stderr


def test_output_to_a_reader_that_went_away_is_no_traceback():
    """`swarm status ... | head`: the reader closed the pipe before we wrote (issue 55, 6)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        out = subprocess.run([sys.executable, str(ROOT / "swarm_cli.py"), "tasks"], stdout=write_end,
                             stderr=subprocess.PIPE, text=True, timeout=120, cwd=ROOT, check=False)
    finally:
        os.close(write_end)
    assert out.returncode == 1 and "Traceback" not in out.stderr and "BrokenPipe" not in out.stderr, out.stderr
