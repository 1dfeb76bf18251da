"""HACPO as a transfer policy (node/rl/transfer/policies/hacpo.py): exact advantages and weights on the built
group, its capability ratio and clamp, its sequence clip, and a peer that trains with it in a swarm."""
import math

import pytest

from node.config import TransferConfig, build_config
from node.generation.rollouts import Completion, Group, Received
from node.rl.transfer.example import decide
from node.rl.transfer.registry import build_policy


def hacpo(**settings):
    return build_policy(TransferConfig("hacpo", tuple(sorted(settings.items()))), checks_work=False)


def group(rewards):
    return Group(None, [1], [Completion([2], [-0.1], "stop", reward=r) for r in rewards])


def test_what_hacpo_does_to_the_built_group():
    """Our rewards 1, 0, 0, 0 (capability 0.25), the partner's 1, 1, 0, 0 (0.5): k = 2, its rewards weigh 1/2 in
    the baseline (b = 0.25), sd = sqrt(1/3). Rows' mean log-ratios: ln(0.01)/3, ln(3)/3, 0, -55/3 (clamped at
    -10): s = 0.215, 1.442, 1, 4.5e-5; only row 3 is within [0.8, 1] and teaches, at weight 1^2 x 2."""
    out = decide("hacpo")
    sd = math.sqrt(1 / 3) + 1e-6
    assert out["used"]
    assert out["advantages"] == pytest.approx([0.0, 0.0, -0.25 / sd, 0.0], rel=1e-6)  # rows 1, 2, 4: outside
    clipped = [0.8 ** 2 * 2, 1.0 ** 2 * 2, 1.0 ** 2 * 2, 0.8 ** 2 * 2]  # one weight a row (s clipped)
    for row, w in zip(out["weights"], clipped, strict=True):
        assert row == pytest.approx([w] * 3, rel=1e-6)
    own_sd = math.sqrt(0.75 / 3) + 1e-6  # our own group: mean baseline, the unbiased std
    assert out["own_advantages"] == pytest.approx([0.75 / own_sd] + [-0.25 / own_sd] * 3, rel=1e-6)
    assert [w for row in out["own_weights"] for w in row] == pytest.approx([1.0] * 12)


def test_capability_is_a_windowed_positive_rate_and_its_ratio_is_clamped():
    policy = hacpo(window=2)
    strong, weak = Received(group([1.0, 1.0]), b"strong"), Received(group([0.0, 1.0, 0.0, 0.0]), b"weak")
    assert policy.capability_ratio(b"strong") == 1.0  # nobody seen yet
    policy.begin_step([group([1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])], [strong, weak])  # ours: 0.1
    assert policy.capability_ratio(b"strong") == 10.0  # 1.0 / 0.1 = 10, at the clamp
    assert policy.capability_ratio(b"weak") == pytest.approx(2.5)
    policy.begin_step([group([0.0] * 10)], [])  # ours 1e-8 (the floor): window of 2 -> (0.1 + 1e-8) / 2
    assert policy.capability_ratio(b"weak") == pytest.approx(0.25 / 0.05)
    policy.begin_step([group([1.0] * 10)], [])  # the window drops the first step: (1e-8 + 1) / 2
    assert policy.capability_ratio(b"weak") == pytest.approx(0.5)
    policy.begin_step([group([1.0] * 10)], [])
    assert policy.capability_ratio(b"weak") == pytest.approx(0.25)


def test_the_baseline_weighs_a_senders_rewards_by_our_capability_over_its():
    policy = hacpo()
    received = Received(group([1.0, 1.0, 0.0, 0.0]), b"s")
    policy.begin_step([group([1.0, 0.0, 0.0, 0.0])], [received])  # k = 0.5 / 0.25 = 2: rewards weigh 1/2
    sd = math.sqrt(1 / 3) + 1e-6
    assert policy.advantages([1.0, 1.0, 0.0, 0.0], received, 1e-4) == pytest.approx(
        [0.75 / sd, 0.75 / sd, -0.25 / sd, -0.25 / sd])
    assert policy.advantages([1.0, 1.0], received, 1e-4) == [0.0, 0.0]  # uniform rewards: no signal made up
    weaker = hacpo()
    weaker.begin_step([group([1.0, 1.0, 1.0, 0.0])], [Received(group([1.0, 0.0, 0.0, 0.0]), b"s")])  # k = 1/3
    b = 3 * 0.25  # rewards weigh 3: the weighted mean 0.75 (<= 1, kept)
    sd = math.sqrt(0.75 / 3) + 1e-6
    assert weaker.advantages([1.0, 0.0, 0.0, 0.0], Received(group([1.0]), b"s"), 1e-4) == pytest.approx(
        [(1 - b) / sd, -b / sd, -b / sd, -b / sd])
    weakest = hacpo()
    weakest.begin_step([group([1.0] * 10)], [Received(group([1.0] + [0.0] * 9), b"s")])  # k = 0.1: b > 1
    sd = math.sqrt(0.5 / 1) + 1e-6  # rewards 1, 0 -> the plain mean 0.5
    assert weakest.advantages([1.0, 0.0], Received(group([1.0]), b"s"), 1e-4) == pytest.approx([0.5 / sd, -0.5 / sd])


def test_hacpo_settings_are_checked():
    assert hacpo(delta=0.5).delta == 0.5
    with pytest.raises(ValueError, match="hacpo needs"):
        hacpo(ratio_min=2.0, ratio_max=1.0)
    with pytest.raises(ValueError, match="not a setting of policy hacpo"):
        hacpo(trunc_c=2.0)


@pytest.mark.slow
def test_a_peer_trains_on_a_partners_groups_with_hacpo():
    from node.peer import Peer
    from node.swarm.memory import MemorySwarm

    hub = MemorySwarm()
    peers = [Peer(build_config({"model": {"name": model}, "task": {"name": "arith"}, "transfer": {"policy": "hacpo"},
                                "train": {"group_policy": "fixed", "group_size": 4, "prompts_per_step": 8,
                                          "seed": seed}, "swarm": {"gather_deadline": 0.2}}),
                  transport=hub.transport(model)) for seed, model in enumerate(("tiny-add", "tiny-sub"))]
    try:
        used = []
        for step in range(3):
            for peer in peers:
                result = peer.step(step)
                assert math.isfinite(result.loss.loss)
                used.append((result.swarm.groups_used, result.loss.sequences))
        assert any(g > 0 for g, _ in used)  # received groups were trained on
        assert peers[0].transfer.capability_ratio(next(iter(peers[0].exchange.ledger.known))) > 0
    finally:
        for peer in peers:
            peer.close()
