"""The e-detector against senders' claimed log-probs (node/rl/transfer/guard.py, its CUSUM in the sender ledger
node/swarm/senders.py): exact values, an honest sampler that never trips it, claims that do within two
completions, and its place in the plan."""
import math
import random

import pytest
import torch

from node.config import TrustConfig
from node.rl.batching import Batch
from node.rl.transfer.guard import evidence_by_sender, row_log_evidence
from node.rl.transfer.plan import plan_loss
from node.swarm.senders import cusum


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
    assert step.tolist() == pytest.approx([math.log(2.0), 2 * math.log(2.0)])
    # a negative past counts as 0: a long honest record buys nothing
    assert cusum(-5.0, 6.0) == 6.0 and cusum(3.0, -4.0) == -1.0


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
    stat, history = 0.0, []
    for _ in range(steps):
        log_ratio = []
        for _ in range(rows):
            tokens = [rng.choices(range(v), [math.exp(x) for x in gen[t]])[0] for t in range(3)]
            log_ratio.append(sum(ours[t][a] - (gen[t][a] - claim_offset) for t, a in enumerate(tokens)))
        row_e = row_log_evidence(torch.tensor(log_ratio, dtype=torch.float64), torch.full((rows,), 3), 0.01, 0.5)
        stat = cusum(stat, float(row_e.sum()))
        history.append(stat)
    return history


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_an_honest_sender_of_another_model_stays_far_below_the_bound(seed):
    assert max(run_detector(0.0, steps=300, rows=16, seed=seed)) < 10.0


def test_claims_below_the_sampler_reach_the_bound_within_a_step():
    # 2 nats a token lower than what it sampled from: weights e^6 times what honest sampling gives
    history = run_detector(2.0, steps=3, rows=16, seed=0)
    assert history[0] >= 20.0


def plan(logp_gen_rows, ledger, transfer_policy, sender_bound=20.0, priors=(0.0, 0.0)):
    """Two own rows and three received rows of senders A, B, A; our model gives every token log(0.5). The
    ledger knows A and B with the given evidence before the step."""
    n = len(logp_gen_rows)
    book = ledger(b"A", b"B", trust=TrustConfig(sender_bound=sender_bound))
    for sender, prior in zip((b"A", b"B"), priors, strict=True):
        book.known[sender].evidence = prior
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
    e_low = math.log(0.5 + 0.5 * math.exp(2 * (12 + math.log(0.5)) - 0.02))
    e_honest = math.log(0.5 + 0.5 * math.exp(-0.02))
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
