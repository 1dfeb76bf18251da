"""The e-detector against senders' claimed log-probs (node/rl/evidence.py): exact values, an honest sampler
that never trips it, claims that do within two completions, and its place in the loss."""
import math
import random

import pytest
import torch

from node.config import LossConfig
from node.rl.evidence import row_log_evidence, sender_statistics
from node.rl.ftis import LossInputs, ftis_objective


def test_a_row_bets_its_likelihood_ratio_after_the_numerical_allowance():
    log_ratio = torch.tensor([0.0, math.log(3.0), math.log(3.0) + 1.0, 1000.0, -1000.0], dtype=torch.float64)
    tokens = torch.tensor([5, 0, 100, 0, 0])
    got = row_log_evidence(log_ratio, tokens, slack=0.01, bet=0.5)
    # (1 - bet) + bet * exp(log_ratio - 0.01 * tokens)
    expected = [math.log(0.5 + 0.5 * math.exp(-0.05)), math.log(2.0), math.log(2.0), 1000.0 + math.log(0.5),
                math.log(0.5)]
    assert got.tolist() == pytest.approx(expected, abs=1e-12)


def test_each_sender_restarts_from_zero_and_adds_its_own_rows_only():
    row_e = torch.tensor([1.0, 2.0, 3.0, 4.0, -7.0])
    sender = torch.tensor([-1, 0, 1, 0, 1])
    prior = torch.tensor([-5.0, 3.0])  # a negative past counts as 0: a long honest record buys nothing
    assert sender_statistics(row_e, sender, prior).tolist() == [6.0, -1.0]


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
    stat, history = torch.zeros(1, dtype=torch.float64), []
    for _ in range(steps):
        log_ratio = []
        for _ in range(rows):
            tokens = [rng.choices(range(v), [math.exp(x) for x in gen[t]])[0] for t in range(3)]
            log_ratio.append(sum(ours[t][a] - (gen[t][a] - claim_offset) for t, a in enumerate(tokens)))
        row_e = row_log_evidence(torch.tensor(log_ratio, dtype=torch.float64), torch.full((rows,), 3), 0.01, 0.5)
        stat = sender_statistics(row_e, torch.zeros(rows, dtype=torch.long), stat)
        history.append(float(stat))
    return history


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_an_honest_sender_of_another_model_stays_far_below_the_bound(seed):
    assert max(run_detector(0.0, steps=300, rows=16, seed=seed)) < 10.0


def test_claims_below_the_sampler_reach_the_bound_within_a_step():
    # 2 nats a token lower than what it sampled from: weights e^6 times what honest sampling gives
    history = run_detector(2.0, steps=3, rows=16, seed=0)
    assert history[0] >= 20.0


def loss_inputs(logp_gen_rows, prior):
    """Two own rows and three received rows of senders 0, 1, 0; our model gives every token log(0.5)."""
    n = len(logp_gen_rows)
    logp = torch.full((n, 2), math.log(0.5), dtype=torch.float64, requires_grad=True)
    return LossInputs(logp=logp, logp_old=logp.detach().clone(),
                      logp_gen=torch.tensor(logp_gen_rows, dtype=torch.float64),
                      mask=torch.ones((n, 2), dtype=torch.bool),
                      advantages=torch.tensor([1.0, -1.0, 1.0, -1.0, 1.0], dtype=torch.float64),
                      own=torch.tensor([True, True, False, False, False]),
                      sender=torch.tensor([-1, -1, 0, 1, 0]), prior=torch.tensor(prior, dtype=torch.float64))


def test_a_sender_reaching_the_bound_gives_no_gradient_from_that_step_on():
    honest = [math.log(0.5)] * 2
    low = [-12.0, -12.0]  # log-ratio 2 * (12 - 0.69) = 22.6 a row
    rows = [honest, honest, low, honest, low]
    inputs = loss_inputs(rows, [0.0, 0.0])
    loss, plan = ftis_objective(inputs, LossConfig())
    e_low = math.log(0.5 + 0.5 * math.exp(2 * (12 + math.log(0.5)) - 0.02))
    e_honest = math.log(0.5 + 0.5 * math.exp(-0.02))
    assert plan.evidence.tolist() == pytest.approx([2 * e_low, e_honest], abs=1e-9)
    assert plan.metrics.distrusted == 2 and plan.metrics.implausible == 0
    assert plan.mask[[2, 4]].sum() == 0 and plan.mask[[0, 1, 3]].all()
    loss.backward()
    assert inputs.logp.grad[[2, 4]].abs().sum() == 0 and inputs.logp.grad[[0, 1, 3]].abs().sum() > 0
    assert plan.metrics.sequences == 3


def test_the_bound_at_zero_keeps_the_evidence_but_distrusts_nobody():
    rows = [[math.log(0.5)] * 2] * 2 + [[-12.0, -12.0], [math.log(0.5)] * 2, [-12.0, -12.0]]
    _, plan = ftis_objective(loss_inputs(rows, [0.0, 0.0]), LossConfig(sender_bound=0.0))
    assert plan.metrics.distrusted == 0 and plan.evidence[0] > 20


def test_a_high_prior_distrusts_even_an_honest_looking_step():
    rows = [[math.log(0.5)] * 2] * 5
    _, plan = ftis_objective(loss_inputs(rows, [19.999, 0.0]), LossConfig())
    assert plan.metrics.distrusted == 0  # the step's evidence is slightly negative: 19.999 - 0.02 < 20
    _, plan = ftis_objective(loss_inputs(rows, [25.0, 0.0]), LossConfig())
    assert plan.metrics.distrusted == 2
