"""Micro-batching (gradient accumulation under a token budget) and mini-batches (several updates per batch):
the accumulated gradient is the whole batch's, and the PPO clip engages from the second update on."""
import copy
import dataclasses

import pytest
import torch

from node.config import GenerationConfig, LossConfig, TrainConfig
from node.generation.rollouts import Completion, Group, Received, length_pieces
from node.generation.transformers_backend import TransformersBackend
from node.rl import learner as learner_module
from node.rl.batching import BYTES_PER_UNIT, automatic_token_budget, micro_batches, mini_batches
from node.rl.learner import Learner, token_budget
from node.swarm.retokenize import spread_logprob


def test_micro_batches_stay_within_the_token_budget():
    assert micro_batches([3, 5, 4, 9, 2], 0) == [[0, 1, 2, 3, 4]]
    # shortest rows first: 2 x 3 = 6 and 2 x 5 = 10 fit, the row of 9 alone (in row order: 4 pieces)
    assert micro_batches([3, 5, 4, 9, 2], 10) == [[4, 0], [2, 1], [3]]
    assert micro_batches([3, 5, 4, 9, 2], 18) == [[4, 0, 2], [1, 3]]
    assert micro_batches([9, 2, 9, 2], 8) == [[1, 3], [0], [2]]  # the two short rows together, not padded to 9
    assert micro_batches([3, 5, 4, 9, 2], 10, shortest_first=False) == [[0, 1], [2], [3], [4]]
    assert micro_batches([30], 10) == [[0]]  # longer than the budget: a piece of its own
    assert micro_batches([], 10) == []


def test_the_automatic_budget_keeps_a_pass_within_its_memory():
    # SmolLM2-135M's sizes (49,152 logits, 30 layers of 576 + 1536) in 6 GiB: 24 x 112,512 bytes a token
    assert automatic_token_budget(49152, 30, 576, 1536, 6 * 2**30) == 6 * 2**30 // (BYTES_PER_UNIT * 112512) == 2385
    assert automatic_token_budget(262144, 18, 640, 2048, 6 * 2**30) == 864  # Gemma 3 270M: its 262k-wide logits
    assert automatic_token_budget(49152, 30, 576, 1536, 10) == 1  # never 0 (0 would mean one unbounded pass)


def test_a_learner_without_a_budget_takes_the_automatic_one(tiny, monkeypatch):
    model = tiny[0]
    config = model.config.get_text_config()
    vocab = model.get_output_embeddings().weight.shape[0]
    monkeypatch.setattr(learner_module, "device_memory", lambda device: 4 * 2**20)
    expected = 2**20 // (BYTES_PER_UNIT * (vocab + config.num_hidden_layers * (config.hidden_size
                                                                               + config.intermediate_size)))
    assert token_budget(model, 0) == expected and 1 < expected < 1000
    assert token_budget(model, 64) == 64  # a configured budget wins
    learner = Learner(copy.deepcopy(model), 0, TrainConfig(), LossConfig(), None, temperature=1.0, lr=0.0)
    assert learner.budget == expected
    monkeypatch.undo()
    assert token_budget(model, 0) > 10**5  # a tiny model on a real machine: a batch stays one pass


def test_length_pieces_sort_rows_when_that_saves_padding():
    widths = [10, 40, 12, 38, 11, 41, 9, 39]
    assert length_pieces(widths, 2) == [[6, 0, 4, 2], [3, 7, 1, 5]]  # 4 x 12 + 4 x 41 = 212 of 8 x 41 = 328
    assert length_pieces(widths, 1) == [list(range(8))]
    assert length_pieces([10, 11, 12, 12], 4) == [[0, 1, 2, 3]]  # 4 pieces would save under 20%: one pass
    assert length_pieces([5, 50], 8) == [[0], [1]]  # at most one piece a row
    assert length_pieces([], 4) == []
    assert sorted(i for piece in length_pieces(widths, 3) for i in piece) == list(range(8))  # every row once


def test_mini_batches_deal_rows_across_groups():
    assert mini_batches(7, 3) == [[0, 3, 6], [1, 4], [2, 5]]
    assert mini_batches(2, 4) == [[0], [1]]
    assert mini_batches(5, 1) == [[0, 1, 2, 3, 4]]


def prefix(c: Completion, n: int) -> Completion:
    """The completion's first n tokens (each behaviour log-prob is its token's: a prefix keeps its own)."""
    cut = n < len(c.token_ids)
    return Completion(c.token_ids[:n], c.logprobs[:n], "length" if cut else c.finish_reason, c.text, c.reward)


@pytest.fixture(scope="module")
def groups(tiny, sampled_groups):
    """Own groups sampled by the model, cut to uneven lengths by construction (completion j of group i keeps
    1 + (i + j) mod its length tokens, whatever lengths the weights sampled), each with a learning signal; the
    same completions as received groups whose claimed behaviour log-probs differ from ours (so w != 1, some
    truncated at C), and two as foreign-tokenizer groups (sequence-level weights)."""
    model, tok = tiny
    torch.manual_seed(0)
    backend = TransformersBackend(model, tok, GenerationConfig(max_new_tokens=8))
    own = sampled_groups(backend, tok, "arith-add", 6, 4, seed=1)
    for i, group in enumerate(own):
        group.completions = [prefix(c, 1 + (i + j) % len(c.token_ids)) for j, c in enumerate(group.completions)]
    received = [Received(Group(g.item, g.prompt_ids, [
        Completion(c.token_ids, [lp - (0.9 if i % 2 else 0.2) for lp in c.logprobs], c.finish_reason, c.text,
                   c.reward) for i, c in enumerate(g.completions)]), b"near") for g in own[:3]]
    foreign = [Received(Group(g.item, g.prompt_ids, [
        Completion(c.token_ids, spread_logprob(sum(c.logprobs) - 0.5, len(c.token_ids)), c.finish_reason, c.text,
                   c.reward) for c in g.completions]), b"far", foreign=True)
               for g in own[3:5]]  # as if re-tokenized from another tokenizer: one weight per row
    lengths = {len(g.prompt_ids) + len(c.token_ids) for g in own for c in g.completions}
    assert len(lengths) > 2  # rows of several widths
    return own, received + foreign


def every_group(groups):
    own, received = groups
    return own + [r.group for r in received]


def gradient(model, groups, train: TrainConfig, loss: LossConfig, policy):
    """The gradient of one update (lr 0 leaves the weights; a huge max norm leaves the gradient unclipped)."""
    model = copy.deepcopy(model)
    learner = Learner(model, 0, train, loss, policy, temperature=1.0, lr=0.0)
    metrics = learner.step(*groups)
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}, metrics


@pytest.mark.parametrize("aggregation, foreign_rows", [("grpo", "one"), ("dapo", "one"), ("grpo", "weight"),
                                                      ("dapo", "weight")])
def test_accumulated_gradients_equal_the_whole_batch_gradient(tiny, groups, aggregation, foreign_rows,
                                                               transfer_policy):
    """(foreign_rows = weight: the foreign groups' rows count as their weights in every micro-batch's normaliser)"""
    loss, policy = LossConfig(aggregation=aggregation), transfer_policy("f-tis", foreign_rows=foreign_rows)
    train = TrainConfig(max_grad_norm=1e9)
    whole, m_whole = gradient(tiny[0], groups, train, loss, policy)
    pieces, m_pieces = gradient(tiny[0], groups, dataclasses.replace(train, micro_batch_tokens=40), loss, policy)
    assert len(micro_batches([len(g.prompt_ids) + len(c.token_ids) for g in every_group(groups)
                              for c in g.completions], 40)) > 4
    assert whole.keys() == pieces.keys() and len(whole) > 0
    worst = max(float((whole[n] - pieces[n]).abs().max()) for n in whole)
    assert worst < 1e-6
    assert max(float(g.abs().max()) for g in whole.values()) > 1e-3  # a real gradient, not zeros
    assert m_whole.truncated_frac > 0 and m_whole.mean_weight > 1.0 and m_whole.dropped_tokens == 0  # w != 1
    assert m_whole.implausible == 0 and m_whole.sequences == sum(len(g.completions) for g in every_group(groups))
    assert m_pieces.loss == pytest.approx(m_whole.loss, abs=1e-6)
    assert (m_pieces.sequences, m_pieces.tokens, m_pieces.filtered) == (m_whole.sequences, m_whole.tokens,
                                                                        m_whole.filtered)


def test_a_forward_pass_in_length_pieces_gives_the_one_pass_gradient(tiny, groups, transfer_policy):
    """train.length_pieces: the whole-batch update's forward pass over rows sorted into pieces of similar
    length (each padded to its own longest row) gives the one-pass gradient, loss and metrics."""
    loss, policy = LossConfig(), transfer_policy("f-tis")

    def longer(g: Group) -> Group:  # five times as long
        return dataclasses.replace(g, completions=[Completion(c.token_ids * 5, c.logprobs * 5, c.finish_reason, c.text,
                                                              c.reward) for c in g.completions])

    own, received = groups
    groups = ([longer(g) if i % 2 else g for i, g in enumerate(own)],  # every other group: widths differ
              [dataclasses.replace(r, group=longer(r.group)) if i % 2 else r for i, r in enumerate(received)])
    widths = [len(g.prompt_ids) + len(c.token_ids) for g in every_group(groups) for c in g.completions]
    assert len(length_pieces(widths, 4)) == 4  # so the pieces act here
    one, m_one = gradient(tiny[0], groups, TrainConfig(max_grad_norm=1e9, length_pieces=1), loss, policy)
    four, m_four = gradient(tiny[0], groups, TrainConfig(max_grad_norm=1e9, length_pieces=4), loss, policy)
    assert one.keys() == four.keys() and len(one) > 0
    scale = max(float(g.abs().max()) for g in one.values())
    assert scale > 1e-3  # a real gradient, not zeros
    worst = max(float((one[n] - four[n]).abs().max()) for n in one)
    assert worst < 5e-5 * scale  # float32 summation order only (measured 5e-6 of the scale)
    assert m_four.loss == pytest.approx(m_one.loss, abs=1e-6)
    assert (m_four.sequences, m_four.tokens, m_four.filtered, m_four.truncated_frac) == (
        m_one.sequences, m_one.tokens, m_one.filtered, m_one.truncated_frac)


def test_later_updates_of_a_batch_are_clipped(tiny, groups, transfer_policy):
    """One update: R = 1, nothing clipped. Four updates at a large rate: the policy moves between them, the
    ratio leaves [1 - eps_low, 1 + eps_high] and the clip engages."""
    loss = LossConfig(eps_low=0.05, eps_high=0.05)
    one = Learner(copy.deepcopy(tiny[0]), 0, TrainConfig(), loss, transfer_policy(), temperature=1.0,
                  lr=3e-2).step(*groups)
    four = Learner(copy.deepcopy(tiny[0]), 0, TrainConfig(mini_batches=4), loss, transfer_policy(), temperature=1.0,
                   lr=3e-2).step(*groups)
    assert one.clip_frac == 0.0
    assert four.clip_frac > 0.0 and four.grad_norm > 0


def test_bf16_autocast_and_gradient_checkpointing_train(tiny, groups, transfer_policy):
    model = copy.deepcopy(tiny[0])
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    learner = Learner(model, 0, TrainConfig(autocast="bf16", gradient_checkpointing=True, micro_batch_tokens=64),
                      LossConfig(), transfer_policy(), temperature=1.0, lr=1e-3)
    metrics = learner.step(*groups)
    assert metrics.grad_norm > 0 and torch.isfinite(torch.tensor(metrics.loss))
    assert any(not before[n].equal(p) for n, p in model.named_parameters())


def test_the_padding_bench_counts_both_orders_exactly():
    from bench.perf.padding import count

    # one step of two groups [1, 9]: in row order (1, 9) and (1, 9) pad to 36 tokens; shortest first (1, 1) and
    # (9, 9) to 20
    assert count([[1, 9], [1, 9]], budget=20, prompt=0, per_step=2) == {
        "real": 20, "row_order": 36, "row_pieces": 2, "shortest": 20, "shortest_pieces": 2}
