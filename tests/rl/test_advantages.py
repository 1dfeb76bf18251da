import pytest

from node.rl.batching import group_advantages, has_variance


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
    from node.report import moving_average

    assert moving_average([1.0, 0.0, 1.0, 1.0], window=2) == [1.0, 0.5, 0.5, 1.0]
