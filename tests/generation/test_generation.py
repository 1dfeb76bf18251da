"""Transformers backend: complete groups whose behaviour log-probs are those of the sampled distribution."""
import pytest
import torch

from node.config import GenerationConfig
from node.generation.rollouts import Group, split_completion
from node.generation.transformers_backend import TransformersBackend
from node.models.loading import encode_prompt
from node.rl.batching import build_batch
from node.rl.learner import sequence_logprobs
from node.rl.transfer.base import clamped_weights
from node.rl.transfer.guard import divergence
from node.tasks import get_task
from tests.fixtures import MODEL_DEFAULTS, forward_logprobs


@pytest.mark.parametrize("temperature, top_p", [(1.0, 1.0), (0.7, 1.0), (0.7, 0.9)])
def test_behaviour_logprobs_match_a_forward_pass(tiny, temperature, top_p):
    model, tok = tiny
    backend = TransformersBackend(model, tok, GenerationConfig(temperature=temperature, top_p=top_p,
                                                               max_new_tokens=6))
    task = get_task("arith")
    # prompts of different lengths, so the batch is left-padded
    items = [task.item("train", i) for i in range(6)]
    prompts = [encode_prompt(tok, it) for it in items]
    assert len({len(p) for p in prompts}) > 1
    groups, seconds = backend.generate(prompts, group_size=4, seed=1)
    assert seconds > 0 and [len(g) for g in groups] == [4] * 6
    checked = 0
    for prompt, group in zip(prompts, groups, strict=True):
        for c in group:
            assert len(c.token_ids) == len(c.logprobs) >= 1
            ref = forward_logprobs(model, prompt, c.token_ids, temperature, top_p)
            assert torch.allclose(torch.tensor(c.logprobs), ref, atol=1e-4), (c, ref)
            checked += len(c.token_ids)
    assert checked >= 24


@pytest.mark.parametrize("lora", [False, True])
def test_sampling_ignores_the_model_generation_config(tiny, lora):
    """A model whose own generation_config sets repetition penalty, top-k, min-p, ...: the backend samples
    exactly the configured distribution (behaviour log-probs equal a plain forward pass), and the model keeps
    its settings."""
    import copy

    from node.config import ModelConfig
    from node.models.loading import wrap_lora

    model = copy.deepcopy(tiny[0])
    model.generation_config.update(**MODEL_DEFAULTS)
    wrapped = wrap_lora(model, ModelConfig(lora=True), seed=0) if lora else model
    backend = TransformersBackend(wrapped, tiny[1], GenerationConfig(max_new_tokens=6))
    task = get_task("arith")
    prompts = [encode_prompt(tiny[1], task.item("train", i)) for i in range(6)]
    groups, _ = backend.generate(prompts, group_size=4, seed=1)
    gaps = [(torch.tensor(c.logprobs) - forward_logprobs(wrapped, p, c.token_ids, 1.0, 1.0)).abs().max().item()
            for p, group in zip(prompts, groups, strict=True) for c in group]
    assert max(gaps) < 1e-4
    repeated = sum(len(c.token_ids) - len(set(c.token_ids)) for group in groups for c in group)
    assert repeated > 0  # no_repeat_ngram_size=1 was not applied: completions repeat tokens ("11", "22")
    assert {k: getattr(model.generation_config, k) for k in MODEL_DEFAULTS} == MODEL_DEFAULTS


def test_finish_reasons_and_eos_cut(tiny):
    model, tok = tiny
    backend = TransformersBackend(model, tok, GenerationConfig(max_new_tokens=1))
    groups, _ = backend.generate([tok("7+8=").input_ids], group_size=8, seed=0)
    # one token cannot hold a two-digit answer plus EOS: every completion is cut by length
    assert all(c.finish_reason == "length" and len(c.token_ids) == 1 for c in groups[0])
    assert split_completion([5, 6, 1, 0, 0], [-1.0] * 5, {1}) == ([5, 6, 1], [-1.0] * 3, "stop")
    assert split_completion([5, 6], [-1.0, -2.0], {1}) == ([5, 6], [-1.0, -2.0], "length")


def test_sampling_is_seeded(tiny):
    model, tok = tiny
    backend = TransformersBackend(model, tok, GenerationConfig(max_new_tokens=8))
    a, _ = backend.generate([tok("3+4=").input_ids], group_size=8, seed=5)
    b, _ = backend.generate([tok("3+4=").input_ids], group_size=8, seed=5)
    other, _ = backend.generate([tok("3+4=").input_ids], group_size=8, seed=6)
    assert [c.token_ids for c in a[0]] == [c.token_ids for c in b[0]]
    assert [c.token_ids for c in a[0]] != [c.token_ids for c in other[0]]  # the seed is what decides


def test_prompts_of_different_lengths_go_in_pieces_and_come_back_in_order(tiny, monkeypatch):
    """generation.length_pieces: prompts sorted by length into batches of their own (each decoding until its own
    longest completion ends); groups come back in the prompts' order, greedy answers as from one batch, and
    each sampled completion's behaviour log-probs are still its own prompt's."""
    model, tok = tiny
    prompts = [tok(text).input_ids for text in ("3+4=", "1234+5678+90=", "7+2=", "4321+8765+12=")]
    calls = []
    one = TransformersBackend(model, tok, GenerationConfig(max_new_tokens=8, length_pieces=1))
    two = TransformersBackend(model, tok, GenerationConfig(max_new_tokens=8, length_pieces=2))
    original = TransformersBackend._generate
    monkeypatch.setattr(TransformersBackend, "_generate",
                        lambda self, ps, *a: calls.append([len(p) for p in ps]) or original(self, ps, *a))
    greedy_one, _ = one.generate(prompts, group_size=1, seed=0, greedy=True)
    assert calls == [[4, 13, 4, 13]]
    calls.clear()
    greedy_two, _ = two.generate(prompts, group_size=1, seed=0, greedy=True)
    assert calls == [[4, 4], [13, 13]]  # the short prompts, then the long ones
    assert [g[0].token_ids for g in greedy_two] == [g[0].token_ids for g in greedy_one]
    groups, _ = two.generate(prompts, group_size=3, seed=2)
    assert [len(g) for g in groups] == [3, 3, 3, 3]
    for prompt, group in zip(prompts, groups, strict=True):
        for c in group:
            expected = forward_logprobs(model, prompt, c.token_ids, 1.0, 1.0)
            assert torch.allclose(torch.tensor(c.logprobs), expected, atol=1e-4)


@pytest.mark.parametrize("temperature", [0.7, 1.0])
def test_the_learner_and_the_generator_agree_on_own_groups(tiny, temperature):
    """On-policy data must look on-policy to the loss: importance weight 1 and divergence 0 (the learner's
    log-probs, from a padded training batch, equal the behaviour log-probs recorded while sampling)."""
    model, tok = tiny
    backend = TransformersBackend(model, tok, GenerationConfig(temperature=temperature, max_new_tokens=6))
    task = get_task("arith")
    items = [task.item("train", i) for i in range(6)]
    prompts = [encode_prompt(tok, it) for it in items]
    outputs, _ = backend.generate(prompts, group_size=4, seed=3)
    groups = [Group(it, p, c) for it, p, c in zip(items, prompts, outputs, strict=True)]
    batch = build_batch(groups, [], backend.pad_id, lambda rewards, _: [0.0] * len(rewards), drop_flat=False)
    with torch.no_grad():
        logp = sequence_logprobs(model, batch, temperature)
    w = clamped_weights(logp - batch.logp_gen, max_log_ratio=20.0, cap=None)
    d_sum, _ = divergence(logp, batch.logp_gen, batch.mask.float())
    assert batch.mask.sum() >= 24
    assert torch.allclose(w[batch.mask], torch.ones_like(w[batch.mask]), atol=1e-5), w[batch.mask]
    assert d_sum.abs().max() <= 1e-5 * batch.mask.sum(dim=1).max()
