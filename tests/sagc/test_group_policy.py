"""Length summaries, evidence weights, batch modes and the peer's group policies."""
import pytest

from node.config import SAGCConfig
from node.generation.rollouts import Completion, Group
from node.metrics import GroupMetrics
from node.sagc.policy import FixedGroups, SAGCGroups, prompts_for, straggled, summarize, summary_weight
from node.tasks import get_task
from protocol.codec import LengthSummary


def group_of(lengths, seconds=0.5):
    item = get_task("arith").item("train", 0)
    comps = [Completion([7] * n, [-1.0] * n, "stop") for n in lengths]
    return Group(item, [3, 4], comps, gen_seconds=seconds)


def summary(g, straggles, family="qwen2"):
    # median 10; the longest 25 straggles at tau 2, 15 does not
    return LengthSummary(g, 25 if straggles else 15, 10.0, 12.0, 12 * g, 1.0, family)


def test_summary_of_a_group_exact():
    s = summarize(group_of([4, 10, 6, 30]), "qwen2")
    assert s == LengthSummary(group_size=4, max_len=30, median_len=8.0, mean_len=12.5, total_tokens=50,
                              gen_seconds=0.5, family="qwen2")
    assert straggled(s, 2.0) and not straggled(s, 4.0)


def test_weights_by_origin_and_family():
    s = summary(8, True)
    assert summary_weight(s, "qwen2", True, 0.5, 0.2) == 1.0
    assert summary_weight(s, "qwen2", False, 0.5, 0.2) == 0.5
    assert summary_weight(s, "llama", False, 0.5, 0.2) == 0.2


def test_batch_modes():
    assert [prompts_for("fixed_prompts", g, 32, 256) for g in (4, 8, 16)] == [32, 32, 32]
    assert [prompts_for("fixed_completions", g, 32, 256) for g in (4, 8, 12, 16)] == [64, 32, 21, 16]


def test_other_peers_teach_the_risk_of_an_untried_size():
    policy = SAGCGroups(SAGCConfig(initial=8, gamma=1.0))
    policy.after_step([summary(8, False)], {b"p1": [summary(16, True)] * 5, b"p2": [summary(16, True)] * 5},
                      family="qwen2")
    post = policy.controller.belief
    assert post(16).alpha == pytest.approx(1 + 5 * 0.5 + 5 * 0.5) and post(16).beta == 1.0  # never tried locally
    assert post(8).beta == 2.0
    other = SAGCGroups(SAGCConfig(initial=8, gamma=1.0))
    other.after_step([summary(8, False)], {b"p": [summary(16, True, family="llama")] * 8}, family="qwen2")
    assert other.controller.belief(16).alpha == pytest.approx(1 + 8 * 0.2)


@pytest.mark.parametrize("flood", [8, 9, 100, 10_000])
def test_one_sender_moves_the_controller_by_at_most_its_bound(flood):
    """A sender's summaries of one step carry at most max_sender_summaries x peer_weight of evidence, however
    many it sends (here: a flood of 'never straggles at 16'); below the cap each one counts in full."""
    cfg = SAGCConfig(initial=8, gamma=1.0, max_sender_summaries=8)
    policy = SAGCGroups(cfg)
    policy.after_step([], {b"flooder": [summary(16, False)] * flood}, family="qwen2")
    post = policy.controller.belief(16)
    assert post.alpha == 1.0
    assert post.beta == pytest.approx(1.0 + min(flood, 8) * cfg.peer_weight)  # exactly the bound: 1 + 8 * 0.5


def test_other_peers_together_never_outweigh_a_bounded_prior_and_own_evidence_wins():
    """However many senders and steps, foreign evidence about one size stays <= max_foreign_evidence
    pseudo-observations; our own groups at that size are not capped, so one step of them outweighs it."""
    cfg = SAGCConfig(initial=16, gamma=1.0, max_foreign_evidence=8.0)
    policy = SAGCGroups(cfg)
    for _ in range(50):
        policy.after_step([], {bytes([i]): [summary(16, False)] * 8 for i in range(10)}, family="qwen2")
    assert policy.controller.foreign[16] == pytest.approx((0.0, 8.0))
    policy.after_step([summary(16, True)] * 16, {}, family="qwen2")
    assert policy.controller.belief(16).mean == pytest.approx((1 + 16) / (1 + 16 + 1 + 8))


def test_sizes_outside_the_candidates_are_ignored_and_rates_are_own():
    policy = SAGCGroups(SAGCConfig())
    m = policy.after_step([summary(16, True), summary(16, False)], {b"p": [summary(6, True)]}, family="qwen2")
    assert m.straggler_rate == 0.5 and m.summaries_used == 2
    assert m.lam == pytest.approx(SAGCConfig().eta * (0.5 - 0.3))
    fixed = FixedGroups(8, tau=2.0)
    after = fixed.after_step([summary(8, True)] * 3 + [summary(8, False)], {}, "x")
    assert fixed.choose() == 8 and after == GroupMetrics(straggler_rate=0.75)


def test_the_seconds_a_size_costs_exact():
    from node.sagc.policy import size_seconds

    assert size_seconds(126.0, 613.0, 1826, 6291) == pytest.approx(126.0 + 613.0 * 1826 / 6291)  # ~304 s, not 739
    assert size_seconds(100.0, 50.0, 300, 300) == 150.0  # nothing received: the whole step
    assert size_seconds(10.0, 20.0, 50, 40) == 30.0  # (own rows the loss left out: never above the whole step)
    assert size_seconds(10.0, 20.0, 50, 0) == 30.0  # a skipped update
