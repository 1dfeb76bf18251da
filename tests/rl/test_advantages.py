import pytest

from node.generation.rollouts import Completion, Group
from node.rl.batching import advantages_of, build_batch, group_advantages, has_variance
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


def test_a_group_with_a_baseline_takes_r_minus_b_and_survives_equal_rewards():
    """swarm.received_baseline = greedy: a received group right everywhere has zero GRPO advantage, but against
    our greedy answer's reward (0: we fail there) each completion's advantage is 1; DAPO's zero-variance drop
    keeps it."""
    item = get_task("digits").item("train", 0)
    comps = [Completion([5, 6], [-0.5, -0.5], "stop", reward=1.0) for _ in range(3)]
    group = Group(item, [1, 2], comps, own=False)
    assert advantages_of(group, eps_std=1e-4) == [0.0, 0.0, 0.0]
    assert build_batch([group], pad_id=0, eps_std=1e-4, drop_zero_variance=True) is None
    group.baseline = 0.0
    assert advantages_of(group, eps_std=1e-4) == [1.0, 1.0, 1.0]
    group.baseline = 0.25
    assert advantages_of(group, eps_std=1e-4) == [0.75, 0.75, 0.75]
    batch = build_batch([group], pad_id=0, eps_std=1e-4, drop_zero_variance=True)
    assert batch is not None and batch.advantages.tolist() == [0.75, 0.75, 0.75]
