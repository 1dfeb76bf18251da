"""The importance-weight benchmark: a sender's own completions weigh exactly 1 under itself, and the receiver's
ratios, divergences and filter shares are read from real zoo models' log-probs."""
import math

import pytest

from bench.experiments import weights


def test_pairs_parse_and_quantiles_are_exact():
    assert weights.parse_pair("a:b@digits") == ("a", "b", "digits")
    with pytest.raises(ValueError):
        weights.parse_pair("a@digits")
    q = weights.quantiles([0.05, 0.5, 1.0, 2.0])
    assert q == {"n": 4, "median": 0.75, "p10": 0.05, "low": 0.25}
    assert math.isnan(weights.quantiles([])["median"])


def test_a_model_weighs_its_own_samples_at_one():
    """Receiver = sender: every token's ratio is 1 (the backend's behaviour log-probs are the model's own, as the
    learner computes them), so nothing is under 0.1, D is 0 and the paper's filter drops nothing."""
    r = weights.measure("digit-add-bpe", "digit-add-bpe", "digits", prompts=4, group=4, seed=0)
    assert r["rows"] == 16
    assert r["tokens"]["all"]["median"] == pytest.approx(1.0, abs=1e-3) and r["tokens"]["all"]["low"] == 0.0
    assert abs(r["d_median"]) < 1e-2 and r["filter_and"] == 0.0
    assert r["filter_or"] > 0  # (the summary's reading drops every row at or below its group's mean)


def test_the_complementary_partner_is_implausible_where_its_skill_is():
    """digit-sub-bpe reading digit-add-bpe's samples: the divergence D of a row is positive (the sender's tokens
    are less likely under the receiver, as KL(sender || receiver) > 0 says they are on average), and some
    tokens weigh under 0.1."""
    r = weights.measure("digit-sub-bpe", "digit-add-bpe", "digits", prompts=8, group=4, seed=0)
    assert r["d_median"] > 0 and r["tokens"]["all"]["low"] > 0
    assert "| digit-sub-bpe <- digit-add-bpe (digits) |" in weights.table([r])[2]
