"""`swarm export`: a trained peer's model as a Hugging Face-ready folder, through the real CLI, loaded back with
plain transformers (no swarm-node code) and compared with the model the run saved."""
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from node.config import ModelConfig
from node.models.loading import load_model, load_tokenizer

ROOT = Path(__file__).resolve().parents[1]


def swarm(*args):
    return subprocess.run([sys.executable, str(ROOT / "swarm_cli.py"), *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=600, check=False)


@pytest.mark.parametrize("lora", [True])  # (a full model's export: tests/test_evaluation.py, on the run it makes)
def test_export_writes_a_folder_transformers_loads_with_a_model_card(tmp_path, lora):
    out, target = tmp_path / "out", tmp_path / "export"
    run = swarm("run", "--model", "tiny-add", "--task", "arith", "--steps", "2", "--prompts", "4", "--eval-every",
                "2", "--set", "eval.prompts=8", "--out", str(out), *(["--lora"] if lora else []))
    assert run.returncode == 0, run.stderr
    done = swarm("export", str(out), str(target))
    assert done.returncode == 0, done.stderr
    assert not (target / "swarm-model.json").exists() and (target / "config.json").exists()
    plain = AutoModelForCausalLM.from_pretrained(target)  # merged: no adapter files, no peft needed
    assert not (target / "adapter_config.json").exists()
    trained = load_model(ModelConfig(name=str(out)))
    tokenizer = load_tokenizer(target)
    ids = torch.tensor([tokenizer("12+7=").input_ids])
    with torch.no_grad():
        assert torch.allclose(plain(ids).logits, trained.model(ids).logits, atol=1e-5)
    card = (target / "README.md").read_text()
    assert card.startswith("---\nlibrary_name: transformers") and "on the task `arith` for 2 steps" in card
    assert "| held-out, in distribution | greedy pass@1 |" in card and "alone (no swarm)" in card
    assert ("through a LoRA adapter (merged here)" in card) == lora
    again = swarm("export", str(out), str(target))  # never over an export
    assert again.returncode == 2 and "is not empty" in again.stderr
