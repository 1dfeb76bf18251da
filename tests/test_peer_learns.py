"""One peer alone measurably learns (bounded by steps, not seconds), and a shuffled-reward control does not.

Both are measured against the run's own start, not against figures of particular weights: any zoo built by
the recipe (labels 30% right: the model's habit is the slip) starts with room to learn."""
import pytest

from node.config import build_config
from node.peer import Peer


def run(steps, lora=False, shuffle=False, seed=0):
    cfg = build_config({"model": {"name": "tiny-add", "lora": lora}, "task": {"name": "arith-add"},
                        "train": {"steps": steps, "seed": seed, "group_policy": "fixed"}})
    peer = Peer(cfg, shuffle_control=shuffle)
    return [peer.step(s).reward for s in range(steps)]


def mean(xs):
    return sum(xs) / len(xs)


@pytest.mark.slow
@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_sampled_reward_rises(lora):
    rewards = run(250, lora=lora)
    # the first steps sample 32 x 8 completions each from (nearly) the pre-trained policy
    first, last = mean(rewards[:5]), mean(rewards[-25:])
    assert last >= first + 0.2, (first, last)


@pytest.mark.slow
def test_shuffled_rewards_do_not_rise():
    rewards = run(150, shuffle=True)
    first, last = mean(rewards[:10]), mean(rewards[-25:])
    assert last < first + 0.1, (first, last)
