"""The harm detector: head gradients per party, their cosines, the sign test, and the learner feeding them."""
import copy
import math

import pytest
import torch

from node.config import LossConfig, ModelConfig, TrainConfig, TrustConfig
from node.generation.rollouts import Completion, Group, Received
from node.models.loading import wrap_lora
from node.rl.alignment import anchor_gradient, cosines, harm_log_bet, head_gradient, sketch_columns
from node.rl.batching import build_batch
from node.rl.learner import Learner
from node.swarm.senders import cusum
from node.tasks import get_task


def harm_statistics(cos: torch.Tensor, prior: torch.Tensor, bet: float) -> torch.Tensor:
    """Each sender's harm CUSUM after one step, as the sender ledger keeps it."""
    return torch.tensor([cusum(float(h), harm_log_bet(float(c), bet)) for c, h in zip(cos, prior, strict=True)])


def test_the_head_gradient_is_the_loss_gradient_of_the_head_weight():
    torch.manual_seed(0)
    head = torch.nn.Linear(5, 7, bias=False)
    hidden = torch.randn(6, 5)
    target = torch.randint(0, 7, (6,))
    logits = head(hidden)
    logits.retain_grad()
    torch.nn.functional.cross_entropy(logits, target, reduction="sum").backward()
    ours = head_gradient(hidden, logits.grad, sketch=None)  # [d, V]
    assert torch.allclose(ours.T, head.weight.grad, atol=1e-6)


def test_a_wide_vocabulary_is_sketched_and_keeps_cosines():
    assert sketch_columns(4096) is None  # kept whole up to the sketch's width
    bucket, sign = sketch_columns(50_000)
    assert bucket.shape == (50_000,) and int(bucket.max()) < 4096 and set(sign.unique().tolist()) == {-1.0, 1.0}
    assert torch.equal(sketch_columns(50_000)[0], bucket)  # a fixed function of the width
    gen = torch.Generator().manual_seed(1)
    hidden = torch.randn(40, 8, generator=gen)
    a = torch.randn(40, 50_000, generator=gen)
    b = 0.6 * a + 0.8 * torch.randn(40, 50_000, generator=gen)
    whole = cosines({0: head_gradient(hidden, a, None), 1: head_gradient(hidden, b, None)}, 1, 1)
    sketched = cosines({0: head_gradient(hidden, a, (bucket, sign)), 1: head_gradient(hidden, b, (bucket, sign))},
                       1, 1)
    assert abs(float(whole[0]) - float(sketched[0])) < 0.05


def test_cosines_are_zero_without_a_gradient_on_either_side():
    g = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    cos = cosines({0: g, 1: -g, 3: torch.zeros(2, 2), 4: g}, reference=4, n_senders=4)
    assert cos.tolist() == pytest.approx([1.0, -1.0, 0.0, 0.0])  # sender 2: no rows; sender 3: all refused
    assert cosines({0: g}, reference=4, n_senders=2).tolist() == [0.0, 0.0]  # no own gradient: no bet


def test_the_harm_statistic_bets_on_the_cosine_and_forgets_a_helpful_past():
    cos = torch.tensor([-0.3, 0.2, 0.0, -0.9, 0.7])
    prior = torch.tensor([1.0, -2.0, 3.0, -5.0, 0.0])
    out = harm_statistics(cos, prior, bet=0.5)
    assert out.tolist() == pytest.approx([1 + math.log(1.3), math.log(0.8), 3.0, math.log(1.5), math.log(0.5)],
                                         rel=1e-6)
    h, steps = torch.zeros(1), 0
    while float(h) < 5.0 and steps < 100:  # against us at -0.25 every step: 23 steps to b = 5
        h, steps = harm_statistics(torch.tensor([-0.25]), h, 0.5), steps + 1
    assert steps == 23


def test_a_partner_teaching_what_we_lack_is_not_demoted_but_one_pulling_against_us_is():
    """Near-orthogonal gradients (cosines of a few hundredths, either sign: what a partner teaching a skill we
    lack gives) stay far below the bound over a long run; a sender whose cosines average -0.15 gets there."""
    gen = torch.Generator().manual_seed(0)
    orthogonal, against = torch.zeros(200), torch.zeros(200)
    peak, demoted_at = torch.zeros(200), torch.full((200,), -1)
    for step in range(1000):  # 200 senders of each kind for 1000 steps
        noise = 0.05 * torch.randn(200, generator=gen)
        orthogonal = harm_statistics(noise, orthogonal, 0.5)
        peak = torch.maximum(peak, orthogonal)
        against = harm_statistics(noise - 0.15, against, 0.5)
        demoted_at = torch.where((against >= 5.0) & (demoted_at < 0), step, demoted_at)
    assert float(peak.max()) < 5.0  # none demoted (over 5000 steps, 1.8% of them would be, for 50 steps each)
    assert bool((demoted_at >= 0).all()) and float(demoted_at.float().median()) < 40


def groups(tok, flip: bool, sender: bytes | None):
    """One group on an addition problem, right and wrong answers; flip: the same completions scored the other
    way round (what they teach points against the unflipped group's); received from `sender` (None: ours)."""
    item = get_task("arith-add").item("train", 0)
    prompt = tok(item.prompt).input_ids
    right = tok(item.answer).input_ids + [tok.eos_token_id]
    wrong = tok(str(int(item.answer) + 1)).input_ids + [tok.eos_token_id]
    r = [0.0, 1.0] if flip else [1.0, 0.0]
    comps = [Completion(right, [-1.0] * len(right), "stop", item.answer, r[0]),
             Completion(wrong, [-1.0] * len(wrong), "stop", "", r[1])]
    group = Group(item, prompt, comps)
    return group if sender is None else Received(group, sender)


@pytest.mark.parametrize("lora", [False, True])
@pytest.mark.parametrize("budget", [0, 16])  # one forward pass, and micro-batches
def test_the_learner_measures_each_senders_pull_against_our_own(tiny, lora, budget, ledger, transfer_policy):
    model = copy.deepcopy(tiny[0])
    if lora:
        model = wrap_lora(model, ModelConfig(lora=True), seed=0)
    tok = tiny[1]
    learner = Learner(model, tok.pad_token_id, TrainConfig(micro_batch_tokens=budget), LossConfig(),
                      transfer_policy("nois"), temperature=1.0, lr=1e-3)
    book = ledger(b"with", b"against")
    book.known[b"against"].harm = 4.8  # close to the bound already
    learner.step([groups(tok, False, None)], [groups(tok, False, b"with"), groups(tok, True, b"against")], book)
    assert book.verdicts.alignments["with"] == pytest.approx(1.0, abs=1e-4)
    assert book.verdicts.alignments["against"] == pytest.approx(-1.0, abs=1e-4)
    assert book.known[b"with"].harm == pytest.approx(math.log(0.5), abs=1e-3)
    # 4.8 + log 1.5 reaches the bound of 5: demoted, its statistic starts afresh
    assert book.verdicts.demoted == 1 and "against" in book.demoted and book.known[b"against"].harm == 0.0
    assert book.verdicts.harm == pytest.approx(4.8 + math.log(1.5), abs=1e-3)


def test_the_detector_off_measures_nothing(tiny, ledger, transfer_policy):
    model = copy.deepcopy(tiny[0])
    learner = Learner(model, tiny[1].pad_token_id, TrainConfig(), LossConfig(), transfer_policy("nois"),
                      temperature=1.0, lr=1e-3)
    book = ledger(b"against", trust=TrustConfig(harm_bound=0.0))
    learner.step([groups(tiny[1], False, None)], [groups(tiny[1], True, b"against")], book)
    assert book.verdicts.alignments == {} and book.known[b"against"].harm == 0.0


def test_measuring_changes_nothing_the_step_computes(tiny, ledger, transfer_policy):
    after = []
    for bound in (5.0, 0.0):
        model = copy.deepcopy(tiny[0])
        Learner(model, tiny[1].pad_token_id, TrainConfig(), LossConfig(), transfer_policy("nois"), temperature=1.0,
                lr=1e-3).step([groups(tiny[1], False, None)], [groups(tiny[1], True, b"against")],
                              ledger(b"against", trust=TrustConfig(harm_bound=bound)))
        after.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
    assert torch.equal(after[0], after[1])


def test_the_anchor_gradient_is_the_likelihood_gradient_at_the_head(tiny):
    """One forward pass, no backward: h (x) (softmax(z / T) - onehot(y)) / T summed over the anchors' tokens is
    what autograd gives for their negative log-likelihood at the logits."""
    model, tok = copy.deepcopy(tiny[0]), tiny[1]
    anchors = [groups(tok, False, None), groups(tok, True, None)]
    batch = build_batch(anchors, [], tok.pad_token_id, lambda rewards, _: [0.0] * len(rewards), drop_flat=False)
    temperature = 0.7
    ours = anchor_gradient(model, batch, temperature)
    hidden = []
    hook = model.get_output_embeddings().register_forward_hook(lambda _m, args, _out: hidden.append(args[0]))
    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention).logits
    hook.remove()
    logits.retain_grad()
    before = batch.positions - 1
    picked = logits.gather(1, before[..., None].expand(-1, -1, logits.shape[-1]))
    tokens = batch.input_ids.gather(1, batch.positions)
    nll = -torch.log_softmax(picked / temperature, -1).gather(2, tokens[..., None]).squeeze(-1)[batch.mask].sum()
    nll.backward()
    rows, cols = batch.mask.nonzero(as_tuple=True)
    h, dz = hidden[0][rows, before[rows, cols]], logits.grad[rows, before[rows, cols]]
    assert torch.allclose(ours, head_gradient(h.detach(), dz, None), atol=1e-5)


def test_without_an_own_signal_our_right_answers_are_the_reference(tiny, ledger, transfer_policy):
    """Our own group scored the same everywhere (no advantage: SmolLM2 on arith): with anchors (a right answer
    of ours), a sender teaching it aligns and one teaching the opposite pulls against it; without, no bet."""
    tok = tiny[1]
    flat = groups(tok, False, None)
    for c in flat.completions:
        c.reward = 0.0
    right = groups(tok, False, None)
    anchor = Group(right.item, right.prompt_ids, right.completions[:1])
    for anchors, expect in (([anchor], True), ([], False)):
        learner = Learner(copy.deepcopy(tiny[0]), tok.pad_token_id, TrainConfig(), LossConfig(),
                          transfer_policy("nois"), temperature=1.0, lr=1e-3)
        book = ledger(b"with", b"against")
        metrics = learner.step([flat], [groups(tok, False, b"with"), groups(tok, True, b"against")], book,
                               anchors=anchors)
        if expect:
            assert metrics.anchors == 1
            assert book.verdicts.alignments["with"] > 0.3 and book.verdicts.alignments["against"] < -0.3
            assert book.known[b"against"].harm > 0 > book.known[b"with"].harm
        else:
            assert metrics.anchors == 0 and book.verdicts.alignments == {"with": 0.0, "against": 0.0}


def test_a_peer_probes_for_anchors_once_and_keeps_only_right_answers():
    """node/peer.py: with too few anchors the peer answers a fixed probe of training prompts greedily and keeps
    what its verifier calls right; it does not probe again within PROBE_EVERY steps; anchors stay bounded."""
    from node.config import build_config
    from node.peer import ANCHORS, PROBE_EVERY, Peer
    from node.tasks import get_task

    peer = Peer(build_config({"model": {"name": "digit-add"}, "task": {"name": "digits"},
                              "generation": {"max_new_tokens": 48}}))
    try:
        task = get_task("digits")
        peer.probe(3)
        first = list(peer.anchors)
        assert first and peer.probed == 3
        for anchor in first:  # right by our verifier, on the text of our own greedy answer
            text = peer.loaded.tokenizer.decode(anchor.completions[0].token_ids, skip_special_tokens=True)
            assert task.score(anchor.item, text, True) == 1.0 and anchor.completions[0].reward == 1.0
        peer.anchors = []
        peer.probe(3 + PROBE_EVERY - 1)  # too soon
        assert peer.anchors == []
        peer.probe(3 + PROBE_EVERY)  # the same prompts, the same weights: the same anchors
        assert [a.completions[0].token_ids for a in peer.anchors] == [a.completions[0].token_ids for a in first]
        peer.keep_anchors([first[0]] * (2 * ANCHORS))
        assert len(peer.anchors) == ANCHORS
    finally:
        peer.close()
