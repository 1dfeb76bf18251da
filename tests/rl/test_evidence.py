"""The e-detector against senders' claimed log-probs (node/rl/transfer/guard.py, its CUSUM in the sender ledger
node/swarm/senders.py): exact values, an honest sampler that never trips it, claims that do within two
completions, and its place in the plan."""
import math
import random

import pytest
import torch

from node.config import TrustConfig
from node.rl.batching import Batch
from node.rl.transfer.guard import (
    SENDER_BETS,
    evidence_by_sender,
    row_log_evidence,
    sender_bets,
    token_log_evidence,
)
from node.rl.transfer.plan import plan_loss, sender_weights
from node.swarm.senders import SenderState, combined_evidence, cusum


def test_a_row_bets_its_likelihood_ratio_after_the_numerical_allowance():
    log_ratio = torch.tensor([0.0, math.log(3.0), math.log(3.0) + 1.0, 1000.0, -1000.0], dtype=torch.float64)
    tokens = torch.tensor([5, 0, 100, 0, 0])
    got = row_log_evidence(log_ratio, tokens, slack=0.01, bet=0.5)
    # (1 - bet) + bet * exp(log_ratio - 0.01 * tokens)
    expected = [math.log(0.5 + 0.5 * math.exp(-0.05)), math.log(2.0), math.log(2.0), 1000.0 + math.log(0.5),
                math.log(0.5)]
    assert got.tolist() == pytest.approx(expected, abs=1e-12)


def test_each_sender_restarts_from_zero_and_adds_its_own_rows_only():
    # rows' log-ratios 0 (r = 1: log-evidence 0 at bet 0.5 with no slack) and log 3 (log 2); own rows not counted
    d_sum = -torch.tensor([0.0, math.log(3.0), math.log(3.0), 0.0, math.log(3.0)], dtype=torch.float64)
    step = evidence_by_sender(d_sum, torch.zeros(5), torch.tensor([False, True, True, True, True]),
                              torch.tensor([-1, 0, 1, 0, 1]), 2, TrustConfig(ratio_bound_per_token=0.0))
    bets = sender_bets(TrustConfig())
    assert bets == (0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625) and step.shape == (2, 2 * SENDER_BETS)
    # rows, then tokens (no tokens given: each row bets as one token)
    assert step[0].tolist() == pytest.approx([math.log(1 + 2 * b) for b in bets] * 2)  # one row at r = 3
    assert step[1].tolist() == pytest.approx([2 * math.log(1 + 2 * b) for b in bets] * 2)
    # with tokens: each token bets on its own ratio; a foreign row's tokens mean nothing, so it bets as one
    tokens = torch.log(torch.tensor([[1.0, 1.0], [3.0, 1.0], [1.0, 3.0], [1.0, 1.0], [9.0, 1.0 / 3]],
                                    dtype=torch.float64))
    mask = torch.ones(5, 2, dtype=torch.bool)
    d_sum = -tokens.sum(dim=1)
    foreign = torch.tensor([False, False, False, False, True])
    step = evidence_by_sender(d_sum, torch.full((5,), 2), torch.tensor([False, True, True, True, True]),
                              torch.tensor([-1, 0, 1, 0, 1]), 2, TrustConfig(ratio_bound_per_token=0.0),
                              tokens, mask, foreign)
    assert step[0, SENDER_BETS:].tolist() == pytest.approx([math.log(1 + 2 * b) for b in bets])  # (3, 1) + (1, 1)
    assert step[1, SENDER_BETS:].tolist() == pytest.approx([2 * math.log(1 + 2 * b) for b in bets])  # (1, 3) +
    #                                                                                  the foreign row's r = 3
    # a negative past counts as 0: a long honest record buys nothing
    assert cusum(-5.0, 6.0) == 6.0 and cusum(3.0, -4.0) == -1.0
    assert combined_evidence((1.0, 25.0, -3.0)) == pytest.approx(25.0 - math.log(3)) and combined_evidence(()) == 0


def categorical_logp(rng: random.Random, v: int) -> list[float]:
    weights = [rng.random() ** 3 for _ in range(v)]
    total = sum(weights)
    return [math.log(w / total) for w in weights]


def run_detector(claim_offset: float, steps: int, rows: int, seed: int) -> list[float]:
    """A sender samples 3-token completions from its own distributions (pi_gen) and claims their log-probs
    minus claim_offset a token; our model's (pi_theta) are different distributions. Returns the statistic."""
    rng = random.Random(seed)
    v = 12
    gen = [categorical_logp(rng, v) for _ in range(3)]
    ours = [categorical_logp(rng, v) for _ in range(3)]
    history = []
    for _ in range(steps):
        log_ratio = []
        for _ in range(rows):
            tokens = [rng.choices(range(v), [math.exp(x) for x in gen[t]])[0] for t in range(3)]
            log_ratio.append([ours[t][a] - (gen[t][a] - claim_offset) for t, a in enumerate(tokens)])
        history.append(detector_step(history[-1][1] if history else None, log_ratio))
    return history


def detector_step(before: tuple | None, log_ratio: list[list[float]]) -> tuple[float, tuple]:
    """(combined statistic, each bet's CUSUM) after one more step of a sender's rows (each a list of its tokens'
    log-ratios), as the ledger keeps them (before: each bet's CUSUM after the steps before; None: none yet)."""
    tokens = torch.tensor(log_ratio, dtype=torch.float64)
    n = torch.full((len(tokens),), tokens.shape[1])
    mask = torch.ones_like(tokens, dtype=torch.bool)
    step = ([float(row_log_evidence(tokens.sum(dim=1), n, 0.01, bet).sum()) for bet in sender_bets(TrustConfig())]
            + [float(token_log_evidence(tokens, mask, 0.01, bet).sum()) for bet in sender_bets(TrustConfig())])
    bets = tuple(cusum(b, x) for b, x in zip(before or (0.0,) * (2 * SENDER_BETS), step, strict=True))
    return combined_evidence(bets), bets


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_an_honest_sender_of_another_model_stays_far_below_the_bound(seed):
    assert max(combined for combined, _ in run_detector(0.0, steps=300, rows=16, seed=seed)) < 10.0


def test_claims_below_the_sampler_reach_the_bound_within_a_step():
    # 2 nats a token lower than what it sampled from: weights e^6 times what honest sampling gives
    history = run_detector(2.0, steps=3, rows=16, seed=0)
    assert history[0][0] >= 20.0


def test_rows_claimed_near_certain_no_longer_offset_rows_pinned_at_the_weight_cap():
    """Issue 54, 3 (stealth): a sender's wrong 3-token rows claimed ln 2 + 0.05 a token below our model's own
    log-probs (weight just above the cap C = 2 on every token), padded with 3-token rows it claims near-certain
    that our model gives 0.5 a token: 4 of one, 12 of the other a step (2 groups of 8). At the one bet of old
    (lambda 0.5) each step's evidence is negative and the CUSUM stays at 0; the small bets see the rows' mean
    ratio above 1 and reach the bound within 16 steps. The weight mass it gets meanwhile is that of an honest
    sampler at most: its tokens' mean truncated weight (12 at 2, 36 at 0.5) is 0.875 <= 1."""
    poison, padding = [math.log(2.0) + 0.05] * 3, [math.log(0.5)] * 3
    log_ratio = [poison] * 4 + [padding] * 12
    old = row_log_evidence(torch.tensor([sum(r) for r in log_ratio], dtype=torch.float64), torch.full((16,), 3),
                           0.01, 0.5)
    assert float(old.sum()) < 0  # (-0.94 a group was measured against the published detector)
    assert steps_to_bound(log_ratio) <= 16


def steps_to_bound(log_ratio: list[list[float]], most: int = 50) -> int:
    combined, bets, steps = 0.0, None, 0
    while combined < 20.0 and steps < most:
        combined, bets = detector_step(bets, log_ratio)
        steps += 1
    return steps


def test_padding_our_model_likes_is_caught_on_its_tokens_within_a_few_steps():
    """The stealth attack as it ran (the attack catalogue's stealth-k4/k8): its padding rows are right answers, which
    our trained model gives far more than 0.5 a token (0.9 here), so its tokens' mean ratio is above 1 (received
    tokens' mean weight 1.00-1.01 against 0.76-0.78 clean): the two families reach the bound within 6 steps."""
    poison, padding = [math.log(2.0) + 0.05] * 3, [math.log(0.9)] * 3
    log_ratio = [poison] * 4 + [padding] * 12
    assert steps_to_bound(log_ratio) <= 6
    assert (12 * 2.0 + 36 * 0.5) / 48 <= 1.0


def plan(logp_gen_rows, ledger, transfer_policy, sender_bound=20.0, priors=(0.0, 0.0)):
    """Two own rows and three received rows of senders A, B, A; our model gives every token log(0.5). The
    ledger knows A and B with the given evidence before the step (every bet's CUSUM at it + its log count)."""
    n = len(logp_gen_rows)
    book = ledger(b"A", b"B", trust=TrustConfig(sender_bound=sender_bound))
    for sender, prior in zip((b"A", b"B"), priors, strict=True):
        book.known[sender].bets = (prior + math.log(2 * SENDER_BETS),) * (2 * SENDER_BETS)
    own = torch.tensor([True, True, False, False, False])
    batch = Batch(torch.zeros(n, 1, dtype=torch.long), torch.ones(n, 1, dtype=torch.long),
                  torch.zeros(n, 2, dtype=torch.long), torch.ones((n, 2), dtype=torch.bool),
                  torch.tensor(logp_gen_rows, dtype=torch.float64),
                  torch.tensor([1.0, -1.0, 1.0, -1.0, 1.0], dtype=torch.float64), own, torch.arange(n),
                  torch.zeros(n, dtype=torch.bool), torch.tensor([-1, -1, 0, 1, 0]), torch.zeros(n, dtype=torch.bool))
    logp = torch.full((n, 2), math.log(0.5), dtype=torch.float64)
    return plan_loss(batch, logp, transfer_policy(), book.trust, book, [b"A", b"B"], 20.0), book


def test_a_sender_reaching_the_bound_gives_no_gradient_from_that_step_on(ledger, transfer_policy):
    honest = [math.log(0.5)] * 2
    low = [-12.0, -12.0]  # log-ratio 2 * (12 - 0.69) = 22.6 a row
    rows = [honest, honest, low, honest, low]
    planned, book = plan(rows, ledger, transfer_policy)
    e_low = math.log(0.5 + 0.5 * math.exp(2 * (12 + math.log(0.5)) - 0.02))  # at the largest bet, 0.5
    e_honest = math.log(1 - 1 / 64 + math.exp(-0.02) / 64)  # at the smallest, 1/64 (the least negative)
    assert [book.known[s].evidence for s in (b"A", b"B")] == pytest.approx([2 * e_low, e_honest], abs=1e-9)
    assert "A" in book.distrusted and "B" not in book.distrusted and book.verdicts.distrusted == 1
    assert planned.metrics.distrusted == 2 and planned.metrics.implausible == 0
    assert planned.mask[[2, 4]].sum() == 0 and planned.mask[[0, 1, 3]].all()
    assert planned.metrics.sequences == 3


def test_the_bound_at_zero_keeps_the_evidence_but_distrusts_nobody(ledger, transfer_policy):
    rows = [[math.log(0.5)] * 2] * 2 + [[-12.0, -12.0], [math.log(0.5)] * 2, [-12.0, -12.0]]
    planned, book = plan(rows, ledger, transfer_policy, sender_bound=0.0)
    assert planned.metrics.distrusted == 0 and book.known[b"A"].evidence > 20 and not book.distrusted


def test_a_high_prior_distrusts_even_an_honest_looking_step(ledger, transfer_policy):
    rows = [[math.log(0.5)] * 2] * 5
    planned, _ = plan(rows, ledger, transfer_policy, priors=(19.999, 0.0))
    assert planned.metrics.distrusted == 0  # the step's evidence is slightly negative: 19.999 - 0.02 < 20
    planned, _ = plan(rows, ledger, transfer_policy, priors=(25.0, 0.0))
    assert planned.metrics.distrusted == 2


def test_each_senders_tokens_at_the_weight_cap_are_counted_for_it(ledger, transfer_policy):
    """Issue 54, 3: a sender whose claims push our weights to the cap is counted for it. F-TIS truncates at
    C = 2: A's first token, claimed at 0.2 where our model gives 0.5 (w = 2.5), is cut to 2; every other token's
    weight is 1. The ledger keeps each sender's tokens, those at the cap and their weight, step by step."""
    honest = [math.log(0.5)] * 2
    rows = [honest, honest, [math.log(0.2), math.log(0.5)], honest, honest]
    planned, book = plan(rows, ledger, transfer_policy)
    assert book.verdicts.weights == {"A": (4, 1, 5.0), "B": (2, 0, 2.0)}
    assert (book.known[b"A"].tokens, book.known[b"A"].capped, book.known[b"A"].mass) == (4, 1, 5.0)
    assert book.known[b"A"].capped_share == 0.25 and book.known[b"B"].capped_share == 0.0
    assert book.known[b"A"].mean_weight == 1.25 and SenderState(book.known[b"A"].announcement, 0.0).capped_share == 0.0
    book.judge_weights({b"A": (4, 3, 8.0), b"B": (0, 0, 0.0)})  # a second step: added; B had no tokens in it
    assert book.known[b"A"].capped_share == 0.5 and book.known[b"B"].tokens == 2


def test_sender_weights_count_only_each_senders_rows_in_the_loss():
    weight = torch.tensor([[1.0, 2.0], [2.0, 0.5], [3.0, 1.0]], dtype=torch.float64)
    truncated = torch.tensor([[False, True], [True, False], [False, False]])
    mask = torch.tensor([[True, True], [True, False], [True, True]])
    sender = torch.tensor([-1, 0, 0])
    assert sender_weights(weight, truncated, mask, sender, 2) == [(3, 1, 6.0), (0, 0, 0.0)]
    assert sender_weights(weight, None, mask, sender, 1) == [(3, 0, 6.0)]
