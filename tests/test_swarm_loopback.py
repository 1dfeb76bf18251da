"""A real loopback swarm: a bootstrap and three heterogeneous peers (one LoRA) as separate processes."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_three_heterogeneous_peers_share_and_all_learn(tmp_path):
    out = subprocess.run(
        [sys.executable, str(ROOT / "swarm_cli.py"), "local", "--peers", "3", "--models",
         "tiny-add,tiny-sub,tiny-add-lora", "--steps", "150", "--task", "arith-add", "--out", str(tmp_path),
         "--set", "train.group_policy=fixed", "--set", "train.prompts_per_step=16",
         "--set", "swarm.received_groups=16"],
        capture_output=True, text=True, timeout=600, cwd=ROOT, check=False)
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert len(summary) == 3
    for name, s in summary.items():
        assert s["steps"] == 150, name
        assert s["max_peers_seen"] == 2, (name, s)  # every other peer published
        assert s["steps_with_received"] >= 100 and s["groups_received"] > 0, (name, s)  # trained on others
        assert s["rejected"] == {}, (name, s)  # honest peers reject nothing
        assert s["reward_last"] >= s["reward_first"] + 0.03, (name, s)  # sampled reward rises
    assert (tmp_path / "rewards.png").exists()
