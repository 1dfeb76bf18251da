import pytest

from node.config import TransferConfig
from node.generation.rollouts import Completion, Group, Received, has_variance
from node.rl.batching import build_batch
from node.rl.transfer.base import group_advantages
from node.rl.transfer.registry import build_policy
from node.tasks import get_task


def test_group_advantages_exact():
    # mean 0.5, population std 0.5
    assert group_advantages([1.0, 0.0, 0.0, 1.0], eps_std=0.0) == [1.0, -1.0, -1.0, 1.0]
    adv = group_advantages([1.0, 0.0, 0.0, 0.0], eps_std=1e-4)
    std = (3 / 16) ** 0.5
    assert adv == pytest.approx([0.75 / (std + 1e-4)] + [-0.25 / (std + 1e-4)] * 3)


def test_equal_rewards_give_zero_advantage_and_no_variance():
    assert group_advantages([1.0, 1.0, 1.0], eps_std=1e-4) == [0.0, 0.0, 0.0]
    assert not has_variance([1.0, 1.0]) and has_variance([0.0, 1.0])


def test_moving_average_exact():
    from node.observability.report import moving_average

    assert moving_average([1.0, 0.0, 1.0, 1.0], window=2) == [1.0, 0.5, 0.5, 1.0]


def test_verified_imitation_takes_r_minus_b_and_a_right_everywhere_group_survives_dapo():
    """A received group right everywhere has zero GRPO advantage, but against our greedy answer's reward (0: we
    fail there) each completion's advantage under verified-imitation is 1; DAPO's drop of groups whose advantages
    are all zero keeps it."""
    item = get_task("digits").item("train", 0)
    comps = [Completion([5, 6], [-0.5, -0.5], "stop", reward=1.0) for _ in range(3)]
    imitation = build_policy(TransferConfig("verified-imitation"), checks_work=True)
    fixed = build_policy(TransferConfig("f-tis"), checks_work=True)

    def batch(policy, greedy):
        received = Received(Group(item, [1, 2], comps), b"s", greedy=greedy)
        return build_batch([], [received], 0, lambda rewards, r: policy.advantages(rewards, r, 1e-4), drop_flat=True)

    assert fixed.advantages([1.0] * 3, Received(Group(item, [1, 2], comps), greedy=0.0), 1e-4) == [0.0] * 3
    assert batch(fixed, 0.0) is None and batch(imitation, None) is None  # no b measured: GRPO's zeros
    assert imitation.advantages([1.0] * 3, Received(Group(item, [1, 2], comps), greedy=0.25), 1e-4) == [0.75] * 3
    kept = batch(imitation, 0.0)
    assert kept is not None and kept.advantages.tolist() == [1.0, 1.0, 1.0] and not kept.own.any()
