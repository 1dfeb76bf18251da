"""The loss as the transfer policies plan it: exact values on hand-written tensors (guard, policy, objective)."""
import math
from dataclasses import dataclass

import pytest
import torch

from node.config import LossConfig, TransferConfig, TrustConfig
from node.rl.batching import Batch
from node.rl.learner import objective
from node.rl.transfer.base import weighted_centering
from node.rl.transfer.plan import plan_loss
from node.rl.transfer.registry import build_policy


def policy(name, **settings):
    return build_policy(TransferConfig(name, tuple(sorted(settings.items()))), checks_work=True)


@dataclass
class Case:
    logp: torch.Tensor  # [N, T] our log-probs (carries the gradient)
    logp_old: torch.Tensor
    batch: Batch


def make(logp, logp_gen, mask, adv, own=None, logp_old=None, work_checked=None, group=None, foreign=None):
    logp = torch.tensor(logp, dtype=torch.float64, requires_grad=True)
    n, t = logp.shape
    own = torch.tensor(own if own is not None else [True] * n)
    batch = Batch(input_ids=torch.zeros(n, 1, dtype=torch.long), attention=torch.ones(n, 1, dtype=torch.long),
                  positions=torch.zeros(n, t, dtype=torch.long), mask=torch.tensor(mask, dtype=torch.bool),
                  logp_gen=torch.tensor(logp_gen, dtype=torch.float64),
                  advantages=torch.tensor(adv, dtype=torch.float64), own=own,
                  group=torch.arange(n) if group is None else torch.tensor(group),
                  foreign=torch.tensor(foreign if foreign is not None else [False] * n),
                  sender=torch.where(own, -1, 0), work_checked=torch.tensor(work_checked or [False] * n))
    old = logp.detach().clone() if logp_old is None else torch.tensor(logp_old, dtype=torch.float64)
    return Case(logp, old, batch)


def grad_of(case, pol, loss=None, trust=None):
    loss, trust = loss or LossConfig(), trust or TrustConfig()
    case.logp.grad = None
    plan = plan_loss(case.batch, case.logp, pol, trust, None, [], loss.max_log_ratio)
    value = objective(plan, case.logp, case.logp_old, loss)
    value.backward()
    return value.item(), case.logp.grad.clone(), plan.metrics


def test_on_policy_with_large_c_is_plain_grpo():
    lp = [[math.log(0.5), math.log(0.25), 0.0], [math.log(0.5), math.log(0.5), math.log(0.1)]]
    mask = [[1, 1, 0], [1, 1, 1]]
    loss, grad, m = grad_of(make(lp, lp, mask, [1.0, -1.0]), policy("f-tis", trunc_c=100.0))
    # plain GRPO: objective = mean_i mean_t A_i = (1 - 1) / 2; d(-J)/d logp = -A_i / (|a_i| * N)
    assert loss == pytest.approx(0.0, abs=1e-12)
    expected = torch.tensor([[-1 / 4, -1 / 4, 0.0], [1 / 6, 1 / 6, 1 / 6]], dtype=torch.float64)
    assert torch.allclose(grad, expected, atol=1e-12)
    assert m.mean_weight == pytest.approx(1.0) and m.filtered == 0 and m.dropped_tokens == 0


@pytest.mark.parametrize("variant, weight", [("tis", 2.0), ("vis", 10.0), ("nois", 1.0), ("f-tis", 2.0)])
def test_truncation_caps_the_weight(variant, weight):
    # learner prob 0.5, generator prob 0.05: w = 10
    inp = make([[math.log(0.5)] * 2], [[math.log(0.05)] * 2], [[1, 1]], [1.0])
    loss, grad, m = grad_of(inp, policy(variant, **({"trunc_c": 2.0} if variant in ("tis", "f-tis") else {})))
    assert loss == pytest.approx(-weight)
    assert m.mean_weight == pytest.approx(weight)
    assert torch.allclose(grad, torch.full((1, 2), -weight / 2, dtype=torch.float64))


def test_filter_zeroes_only_negative_advantage_high_divergence():
    far, near = -30.0, -0.1
    # row 0: positive advantage and far from the learner (kept); row 1: negative and far (filtered);
    # rows 2, 3: negative and near (kept)
    lp = [[far, far], [far, far], [near, near], [near, near]]
    gen = [[near, near]] * 4
    adv = [1.5, -0.5, -0.5, -0.5]
    mask = [[1, 1]] * 4
    _, g_tis, m_tis = grad_of(make(lp, gen, mask, adv), policy("tis"))
    _, g_f, m_f = grad_of(make(lp, gen, mask, adv), policy("f-tis", g=50.0))
    assert m_f.filtered == 1 and m_f.kept == 3 and m_tis.filtered == 0
    assert m_f.filtered_frac == 0.25 and m_tis.filtered_frac == 0.0
    assert torch.equal(g_f[1], torch.zeros(2, dtype=torch.float64))
    assert not torch.equal(g_tis[1], torch.zeros(2, dtype=torch.float64))
    # the other rows (and the 1/N group denominator) are exactly as without the filter
    for row in (0, 2, 3):
        assert torch.equal(g_f[row], g_tis[row])
    assert m_f.div_sum_max == pytest.approx(2 * 29.9)


def test_filter_uses_the_configured_reduction():
    lp, gen = [[-30.0, -30.0]], [[-0.1, -0.1]]
    _, _, by_sum = grad_of(make(lp, gen, [[1, 1]], [-1.0]), policy("f-tis", g=50.0))
    _, _, by_mean = grad_of(make(lp, gen, [[1, 1]], [-1.0]), policy("f-tis", g=50.0, divergence="mean"))
    assert by_sum.filtered == 1  # D = 59.8 > 50
    assert by_mean.filtered == 0  # D = 29.9 <= 50


def test_bad_behaviour_logprobs_are_dropped_and_never_reach_the_gradient():
    lp = [[-1.0, -1.0, -1.0], [-1.0, -1.0, -1.0]]
    gen = [[-1.0, float("nan"), -1.0], [float("inf"), -1.0, 0.5]]
    inp = make(lp, gen, [[1, 1, 1], [1, 1, 1]], [1.0, -1.0])
    loss, grad, m = grad_of(inp, policy("f-tis"))
    assert m.dropped_tokens == 3 and m.tokens == 3
    assert math.isfinite(loss) and torch.isfinite(grad).all()
    assert grad[0, 1] == 0 and grad[1, 0] == 0 and grad[1, 2] == 0
    # the surviving tokens are on-policy: row 0 mean over 2 tokens, row 1 over 1 token, N = 2
    assert grad[0, 0] == pytest.approx(-1 / 4) and grad[1, 1] == pytest.approx(1 / 2)


def test_dapo_aggregation_is_a_token_mean():
    lp = [[-1.0, -1.0, 0.0], [-1.0, -1.0, -1.0]]
    inp = make(lp, lp, [[1, 1, 0], [1, 1, 1]], [2.0, -1.0])
    loss, grad, _ = grad_of(inp, policy("tis"), LossConfig(aggregation="dapo"))
    assert loss == pytest.approx(-(2 * 2 - 1 * 3) / 5)
    assert torch.allclose(grad, torch.tensor([[-0.4, -0.4, 0.0], [0.2, 0.2, 0.2]], dtype=torch.float64))


def test_ppo_clip_bounds_the_ratio():
    # R = pi_theta / pi_old = 1.5 on a positive advantage: clipped to 1 + eps_high, no gradient
    inp = make([[math.log(0.6)]], [[math.log(0.6)]], [[1]], [1.0], logp_old=[[math.log(0.4)]])
    loss, grad, m = grad_of(inp, policy("nois"), LossConfig(eps_high=0.28))
    assert loss == pytest.approx(-1.28)
    assert grad.item() == 0.0 and m.clip_frac == 1.0


def test_alone_ignores_received_completions():
    lp = [[-1.0], [-1.0]]
    inp = make(lp, lp, [[1], [1]], [1.0, -1.0], own=[True, False])
    loss, grad, m = grad_of(inp, policy("alone"))
    assert loss == pytest.approx(-1.0) and m.sequences == 1
    assert grad[1, 0] == 0.0


def test_received_groups_whose_claims_are_implausibly_low_give_no_gradient():
    """Markov on E[pi_theta / pi_gen] <= 1: a received group whose total log-ratio sum(log pi_theta -
    log pi_gen) exceeds ratio_bound + ratio_bound_per_token * tokens is dropped, whole; own rows never are."""
    trust = TrustConfig(ratio_bound=20.0, ratio_bound_per_token=0.5)
    # group 0: two received rows of 2 tokens, log-ratio 5 per token: total 20 <= 20 + 0.5 * 4 = 22 (kept)
    # group 1: same rows, log-ratio 6 per token: total 24 > 22 (dropped, both rows, whatever their advantage)
    # group 2: log-ratio 6 per token, but our own rows (never checked)
    lp = [[-1.0, -1.0]] * 6
    gen = [[-6.0, -6.0]] * 2 + [[-7.0, -7.0]] * 4
    adv = [1.0, -1.0] * 3
    inp = make(lp, gen, [[1, 1]] * 6, adv, own=[False] * 4 + [True] * 2, group=[0, 0, 1, 1, 2, 2])
    _, grad, m = grad_of(inp, policy("f-tis"), trust=trust)
    assert m.implausible == 2 and m.sequences == 4
    assert torch.equal(grad[2:4], torch.zeros(2, 2, dtype=torch.float64))
    assert (grad[[0, 1, 4, 5]] != 0).all()
    # the same rows as groups of their own: 12 <= 20 + 0.5 * 2 each; the evidence is in the group's sum
    alone = make(lp, gen, [[1, 1]] * 6, adv, own=[False] * 4 + [True] * 2)
    assert grad_of(alone, policy("f-tis"), trust=trust)[2].implausible == 0


@pytest.mark.parametrize("name", ["nois", "tis", "f-tis", "verified-imitation", "success-gated"])
def test_a_completion_our_model_finds_implausibly_unlikely_is_dropped_under_every_policy(name):
    lp, gen = [[-25.0, -25.0], [-1.0, -1.0]], [[-0.1, -0.1], [-1.0, -1.0]]
    _, grad, m = grad_of(make(lp, gen, [[1, 1]] * 2, [1.0, 1.0], own=[False, False], work_checked=[True, True]),
                         policy(name), trust=TrustConfig(div_ceiling=20.0))
    assert m.implausible == 1 and grad[0].abs().sum() == 0 and grad[1].abs().sum() > 0


def test_negative_c_caps_only_received_negatives():
    # w = 10 everywhere; trunc_c 2; negative_c 1: the received negative row weighs 1, the others 2
    lp, gen = [[math.log(0.5)]] * 3, [[math.log(0.05)]] * 3
    inp = make(lp, gen, [[1]] * 3, [1.0, -1.0, -1.0], own=[False, False, True])
    _, grad, _ = grad_of(inp, policy("tis", trunc_c=2.0, negative_c=1.0))
    assert grad[:, 0].tolist() == pytest.approx([-2 / 3, 1 / 3, 2 / 3])
    _, grad, _ = grad_of(inp, policy("tis", trunc_c=2.0))
    assert grad[:, 0].tolist() == pytest.approx([-2 / 3, 2 / 3, 2 / 3])


def test_verified_imitation_raises_only_received_positives_whose_work_was_checked():
    # w = 0.01 everywhere (we give the text 1/100 of the sender's probability, 4.6 nats a token); floor 1 for
    # rows up to 5 nats a token: the received positive row weighs 1, the received negative and our own row keep
    # 0.01; a floor never lifts w above C, and lifts only rows whose verifier checked the work
    lp, gen = [[math.log(0.001)]] * 3, [[math.log(0.1)]] * 3
    inp = make(lp, gen, [[1]] * 3, [1.0, -1.0, 1.0], own=[False, False, True], work_checked=[True, True, True])
    _, grad, m = grad_of(inp, policy("verified-imitation", floor_div=5.0))
    assert grad[:, 0].tolist() == pytest.approx([-1 / 3, 0.01 / 3, -0.01 / 3])
    assert m.floored == 1
    for off in (policy("verified-imitation", floor=0.0), policy("f-tis")):  # floor off, or plain F-TIS, or ...
        _, grad, m = grad_of(inp, off)
        assert grad[:, 0].tolist() == pytest.approx([-0.01 / 3, 0.01 / 3, -0.01 / 3]) and m.floored == 0
    unchecked = make(lp, gen, [[1]] * 3, [1.0, -1.0, 1.0], own=[False, False, True])  # ... an answer-only verifier
    _, grad, m = grad_of(unchecked, policy("verified-imitation", floor_div=5.0))
    assert grad[:, 0].tolist() == pytest.approx([-0.01 / 3, 0.01 / 3, -0.01 / 3]) and m.floored == 0
    high = make([[math.log(0.5)]], [[math.log(0.05)]], [[1]], [1.0], own=[False], work_checked=[True])  # w = 10: C
    _, grad, _ = grad_of(high, policy("verified-imitation"))
    assert grad[0, 0].item() == pytest.approx(-2.0)
    low = make(lp[:1], gen[:1], [[1]], [1.0], own=[False], work_checked=[True])  # a floor above C lifts to C only
    _, grad, _ = grad_of(low, policy("verified-imitation", trunc_c=0.5, floor_div=5.0))
    assert grad[0, 0].item() == pytest.approx(-0.5)
    with pytest.raises(ValueError, match="floor"):
        policy("verified-imitation", floor=-1.0)


def test_verified_imitation_leaves_text_we_would_not_write_muted():
    # a right answer after made-up work: two tokens at 1/100 of the sender's probability (4.6 nats each) is past
    # the default floor_div (4): the row keeps F-TIS's w = 0.01; a partner's skill in one token of two (mean 2.3
    # nats) is lifted to 1
    junk = make([[math.log(0.001)] * 2], [[math.log(0.1)] * 2], [[1, 1]], [1.0], own=[False], work_checked=[True])
    _, grad, m = grad_of(junk, policy("verified-imitation"))
    assert grad[0].tolist() == pytest.approx([-0.01 / 2] * 2) and m.floored == 0
    skill = make([[math.log(0.001), math.log(0.1)]], [[math.log(0.1)] * 2], [[1, 1]], [1.0], own=[False],
                 work_checked=[True])
    _, grad, m = grad_of(skill, policy("verified-imitation"))
    assert grad[0].tolist() == pytest.approx([-1 / 2] * 2) and m.floored == 1
    with pytest.raises(ValueError, match="floor_div"):
        policy("verified-imitation", floor_div=0.0)


# ---- foreign tokenizers: one sequence-level weight per row (node/rl/transfer/plan.py) --------------------
def uncentred(name, **settings):
    """A policy without the re-centring of foreign groups (the rows below are groups of one: centring would zero
    their advantage)."""
    return policy(name, **settings) if name == "nois" else policy(name, foreign_centering=False, **settings)


def make_seq(logp, logp_gen, adv, foreign, own=None):
    return make(logp, logp_gen, [[1] * len(logp[0])] * len(logp), adv, own=own or [False] * len(adv),
                foreign=foreign)


def test_sequence_weight_is_the_geometric_mean_of_the_text_ratio():
    """Our 4 tokens log-probs -1, -2, -1, -2 (sum -6); the sender's total -8, spread as -2 a token: the weight is
    exp((-6 + 8) / 4) = e^0.5 on every token of the row, below C = 2."""
    from node.swarm.retokenize import spread_logprob

    gen = spread_logprob(-8.0, 4)
    assert gen == [-2.0] * 4
    loss, grad, m = grad_of(make_seq([[-1.0, -2.0, -1.0, -2.0]], [gen], [1.0], [True]), uncentred("tis"))
    w = math.exp(0.5)
    assert loss == pytest.approx(-w, abs=1e-12)
    assert torch.allclose(grad, torch.full((1, 4), -w / 4, dtype=torch.float64), atol=1e-12)
    assert m.mean_weight == pytest.approx(w) and m.truncated_frac == 0.0
    # per token the same row would weigh e^1, e^0, e^1, e^0: a different gradient
    _, per_token, _ = grad_of(make_seq([[-1.0, -2.0, -1.0, -2.0]], [gen], [1.0], [False]), uncentred("tis"))
    assert not torch.allclose(per_token, grad)


@pytest.mark.parametrize("name, expected", [("tis", 2.0), ("f-tis", 2.0), ("vis", math.exp(1.5)),
                                            ("nois", 1.0)])
def test_sequence_weight_is_truncated_at_c_like_token_weights(name, expected):
    """Sender's total -12 over our 4 tokens (sum -6): exp(6 / 4) = 4.48, truncated at C = 2 (TIS), kept (VIS),
    1 (NoIS)."""
    inp = make_seq([[-1.0, -2.0, -1.0, -2.0]], [[-3.0] * 4], [1.0], [True])
    loss, grad, m = grad_of(inp, uncentred(name))
    assert loss == pytest.approx(-expected, rel=1e-12)
    assert torch.allclose(grad, torch.full((1, 4), -expected / 4, dtype=torch.float64), atol=1e-12)
    assert m.truncated_frac == (1.0 if name in ("tis", "f-tis") else 0.0)  # the tokens the cap cut


def test_received_rows_take_one_sequence_weight_when_configured():
    """A received right completion whose skill token we give e^-6 (sender e^-0.1), its other tokens as the
    sender: per token F-TIS weighs the skill token e^-5.9 (its gradient nearly muted); with sequence weights every
    token of the row weighs exp(-5.9 / 4); our own row keeps its per-token weights (1 on policy)."""
    lp = [[-0.1, -6.0, -0.1, -0.1], [-0.5, -0.5, -0.5, -0.5]]
    gen = [[-0.1, -0.1, -0.1, -0.1], [-0.5, -0.5, -0.5, -0.5]]
    _, token, _ = grad_of(make(lp, gen, [[1] * 4] * 2, [1.0, 1.0], own=[False, True]), policy("f-tis"))
    _, seq, m = grad_of(make(lp, gen, [[1] * 4] * 2, [1.0, 1.0], own=[False, True]),
                        policy("f-tis", sequence_weights=True))
    w = math.exp(-5.9 / 4)
    assert token[0].tolist() == pytest.approx([-1 / 8, -math.exp(-5.9) / 8, -1 / 8, -1 / 8])
    assert seq[0].tolist() == pytest.approx([-w / 8] * 4)  # the skill token: 0.23 of a full weight, not 0.003
    assert seq[1].tolist() == pytest.approx(token[1].tolist()) and token[1].tolist() == pytest.approx([-1 / 8] * 4)
    assert m.filtered == 0


@pytest.mark.parametrize("aggregation", ["grpo", "dapo"])
def test_a_foreign_row_counts_as_its_weight_in_the_normaliser_when_configured(aggregation):
    """Our own on-policy row (4 tokens, A = 1) beside a foreign row we find e^-1 as likely a token as its sender
    did (weight w = e^-1, A = 1): counted once (the default) the own row's tokens get 1/8 of a unit gradient each
    (grpo: 2 rows; dapo: 8 tokens); counted as its weight, 1 / (4 (1 + w)): the foreign row no longer halves ours."""
    w = math.exp(-1.0)
    lp, gen = [[-0.5] * 4, [-2.0] * 4], [[-0.5] * 4, [-1.0] * 4]
    grads = {}
    for rows in ("one", "weight"):
        inp = make(lp, gen, [[1] * 4] * 2, [1.0, 1.0], own=[True, False], foreign=[False, True])
        loss, grads[rows], _ = grad_of(inp, uncentred("f-tis", foreign_rows=rows), LossConfig(aggregation=aggregation))
        share = 1.0 if rows == "one" else w
        assert loss == pytest.approx(-(1 + w) / (1 + share), rel=1e-12)  # row means 1 and w, tokens alike
    assert grads["one"][0].tolist() == pytest.approx([-1 / 8] * 4)
    assert grads["weight"][0].tolist() == pytest.approx([-1 / (4 * (1 + w))] * 4)
    assert grads["weight"][1].tolist() == pytest.approx([-w / (4 * (1 + w))] * 4)
    own_only = make(lp[:1], gen[:1], [[1] * 4], [1.0])  # with no foreign row, the setting changes nothing
    assert grad_of(own_only, policy("f-tis", foreign_rows="weight"))[0] == pytest.approx(-1.0)


def test_the_filter_uses_the_tokenization_invariant_divergence():
    """A negative foreign row whose text the sender found far likelier than we do: D = sum(gen) - sum(ours)
    = -8 - (-64) = 56 > g = 50: filtered; at a sender total of -20, D = 44: kept."""
    ours = [[-16.0] * 4]
    far = make_seq(ours, [[-2.0] * 4], [-1.0], [True])
    near = make_seq(ours, [[-5.0] * 4], [-1.0], [True])
    _, g_far, m_far = grad_of(far, uncentred("f-tis", g=50.0))
    _, g_near, m_near = grad_of(near, uncentred("f-tis", g=50.0))
    assert m_far.filtered == 1 and torch.equal(g_far, torch.zeros_like(g_far))
    assert m_near.filtered == 0 and m_near.div_sum_max == pytest.approx(44.0)


@pytest.mark.parametrize("offset", [0.0, 0.3, -0.7])
def test_with_an_identical_tokenizer_the_sequence_weight_reduces_to_per_token_ftis(offset):
    """The case where it must: every per-token log-ratio of a row is the same (on-policy rows: offset 0, or a
    constant offset below log C), so the geometric mean equals each token weight. Loss, gradient and metrics
    of the sequence-level path then equal the per-token F-TIS result, with mixed advantages and lengths."""
    lp = [[-0.5, -1.5, -0.2], [-2.0, -0.1, -0.9], [-1.0, -1.0, -3.0]]
    gen = [[x - offset for x in row] for row in lp]
    mask = [[1, 1, 0], [1, 1, 1], [1, 1, 1]]
    adv = [1.0, -0.5, -0.5]
    seq = make(lp, gen, mask, adv, own=[False] * 3, foreign=[True] * 3)
    tok = make(lp, gen, mask, adv, own=[False] * 3)
    loss_s, grad_s, m_s = grad_of(seq, uncentred("f-tis"))
    loss_t, grad_t, m_t = grad_of(tok, uncentred("f-tis"))
    assert loss_s == pytest.approx(loss_t, abs=1e-12)
    assert torch.allclose(grad_s, grad_t, atol=1e-12)
    assert m_s.mean_weight == pytest.approx(m_t.mean_weight) == pytest.approx(math.exp(offset))


def test_success_gated_learns_only_from_received_successes_at_weight_one():
    """Success-gated transfer: received rows with A <= 0 give no gradient (whatever their divergence), received
    rows with A > 0 weigh 1 however unlikely our model finds them, own rows are plain GRPO."""
    lp = [[math.log(0.5)] * 2, [math.log(0.5)] * 2, [math.log(0.01)] * 2, [math.log(0.01)] * 2]
    gen = [[math.log(0.5)] * 2, [math.log(0.5)] * 2, [math.log(0.9)] * 2, [math.log(0.9)] * 2]
    inp = make(lp, gen, [[1, 1]] * 4, [1.0, -1.0, 1.0, -1.0], own=[True, True, False, False])
    loss, grad, m = grad_of(inp, policy("success-gated"))
    # rows: own +, own -, received + (weight 1, not 0.011), received - (filtered); GRPO mean over the 4 rows
    expected = torch.tensor([[-1 / 8] * 2, [1 / 8] * 2, [-1 / 8] * 2, [0.0] * 2], dtype=torch.float64)
    assert torch.allclose(grad, expected, atol=1e-12)
    assert m.filtered == 1 and m.kept == 3 and m.mean_weight == pytest.approx(1.0)
    _, grad_ftis, _ = grad_of(inp, policy("f-tis"))
    assert abs(grad_ftis[2, 0]) < abs(grad[2, 0]) / 50  # F-TIS weighs the same success pi_theta / pi_gen ~ 0.011


def test_weighted_centering_makes_each_groups_weighted_advantages_sum_to_zero():
    adv = torch.tensor([1.0, -1.0, -1.0, 0.5, 2.0])
    w = torch.tensor([0.1, 0.4, 0.5, 1.0, 3.0])
    group = torch.tensor([0, 0, 0, 1, 1])
    rows = torch.tensor([True, True, True, False, False])  # group 1: not foreign, unchanged
    out = weighted_centering(adv, w, group, rows)
    mean = (0.1 * 1 - 0.4 - 0.5) / 1.0  # sum w A / sum w over group 0
    assert out.tolist() == pytest.approx([1 - mean, -1 - mean, -1 - mean, 0.5, 2.0])
    assert float((w[:3] * out[:3]).sum()) == pytest.approx(0.0, abs=1e-6)


def test_a_foreign_group_no_longer_pushes_down_what_all_its_completions_share():
    """Two foreign rows of one group, right (A > 0, the sender was sure of it: w small) and wrong (A < 0, w
    larger); they share their tokens but the last. Without centering the shared tokens get a net push down
    (the wrong row outweighs); with it, none."""
    lp = torch.log(torch.tensor([[0.5, 0.5, 0.2], [0.5, 0.5, 0.1]], dtype=torch.float64)).tolist()
    gen = torch.log(torch.tensor([[0.9, 0.9, 0.9], [0.5, 0.5, 0.2]], dtype=torch.float64)).tolist()
    grads = {}
    for centering in (False, True):
        inp = make(lp, gen, [[1, 1, 1]] * 2, [1.0, -1.0], own=[False, False], group=[0, 0], foreign=[True, True])
        _, grads[centering], _ = grad_of(inp, policy("f-tis", foreign_centering=centering))
    shared = lambda g: float(g[:, :2].sum())  # noqa: E731 (the loss's pull on the shared tokens' log-probs)
    assert shared(grads[False]) > 1e-3  # the loss rises with them: a step lowers their likelihood
    assert shared(grads[True]) == pytest.approx(0.0, abs=1e-6)
