"""What each transfer policy does to one built received group (node/rl/transfer/example.py), value by value; and
the table of it in docs/ALGORITHMS.md is the one the code prints."""
import math
from pathlib import Path

import pytest

from node.rl.transfer.example import decide, table
from node.rl.transfer.registry import registry

A = 0.5 / (0.5 + 1e-4)  # GRPO's advantage of rewards 1, 1, 0, 0 (population std 0.5, eps_std 1e-4)
TINY = math.exp(-20.0)  # log-ratio -55, clamped at -loss.max_log_ratio before exp
ONES = [[1.0] * 3] * 4
PER_TOKEN = [[1.0, 0.01, 1.0], [2.0, 1.0, 1.0], [1.0] * 3, [TINY, 1.0, 1.0]]  # min(w, C = 2)
UNCAPPED = [[1.0, 0.01, 1.0], [3.0, 1.0, 1.0], [1.0] * 3, [TINY, 1.0, 1.0]]
EXPECTED = {  # policy -> (advantages of the 4 received rows, their per-token weights)
    "nois": ([A, A, -A, -A], ONES),
    "tis": ([A, A, -A, -A], PER_TOKEN),
    "vis": ([A, A, -A, -A], UNCAPPED),
    "f-nois": ([A, A, -A, 0.0], ONES),  # row 4: A <= 0 and D = 55 >= g = 50
    "f-vis": ([A, A, -A, 0.0], UNCAPPED),
    "f-tis": ([A, A, -A, 0.0], PER_TOKEN),
    "f-tis-or": ([A, A, 0.0, 0.0], PER_TOKEN),  # every received row at or below its group's mean
    "success-gated": ([A, A, 0.0, 0.0], ONES),  # b = 0 < 1: used; A <= 0 filtered; weight 1
    # A = r - b with b = 0; the right rows (work checked, mean divergence 1.5 <= 4) lifted to at least 1
    "verified-imitation": ([1.0, 1.0, 0.0, 0.0], [[1.0, 1.0, 1.0], [2.0, 1.0, 1.0], [1.0] * 3, [TINY, 1.0, 1.0]]),
}
OWN = 0.75 / (math.sqrt(3 / 16) + 1e-4), -0.25 / (math.sqrt(3 / 16) + 1e-4)  # own rewards 1, 0, 0, 0


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_policy_gives_these_advantages_and_weights(name):
    out = decide(name)
    advantages, weights = EXPECTED[name]
    assert out["used"]
    assert out["advantages"] == pytest.approx(advantages, rel=1e-6, abs=1e-12)
    for row, expected in zip(out["weights"], weights, strict=True):
        assert row == pytest.approx(expected, rel=1e-5)
    # our own on-policy group: GRPO's advantages at weight 1 under every one of these
    assert out["own_advantages"] == pytest.approx([OWN[0], OWN[1], OWN[1], OWN[1]], rel=1e-6)
    assert [w for row in out["own_weights"] for w in row] == pytest.approx([1.0] * 12, rel=1e-6)


def test_alone_uses_no_received_group():
    out = decide("alone")
    assert not out["used"] and out["advantages"] == [] and out["weights"] == []
    assert [w for row in out["own_weights"] for w in row] == pytest.approx([1.0] * 12)


def test_every_registered_policy_is_in_the_table_and_asserted_here():
    assert set(registry()) <= set(EXPECTED) | {"alone", "hacpo"}
    assert all(f"| {name} |" in table() for name in registry())


def test_the_docs_show_the_table_the_code_prints():
    page = (Path(__file__).parents[3] / "docs" / "ALGORITHMS.md").read_text()
    assert table() in page
