"""SAGC controller: scripted straggler outcomes with exact or bounded expectations."""
import json

import pytest

from node.config import SAGCConfig
from node.sagc.controller import SAGC, Posterior, decay, dual_step, straggles


def drive(ctrl, steps, straggles):
    """Runs the controller against a scripted outcome per size; returns the chosen sizes."""
    sizes = []
    for _ in range(steps):
        g = ctrl.choose()
        s = straggles(g)
        ctrl.observe(g, s)
        ctrl.end_step(float(s))
        sizes.append(g)
    return sizes


def test_straggler_event_exact():
    assert straggles(21, 10, tau=2.0) and not straggles(20, 10, tau=2.0)  # e.g. lengths [10, 10, 21] / [.., 20]
    assert not straggles(6, 4.5, tau=2.0) and straggles(9, 1, tau=2.0)  # [3, 4, 5, 6] / [1, 1, 1, 9]
    assert straggles(3, 0, tau=2.0)  # the median is floored at 1 token


def test_pure_pieces_exact():
    assert dual_step(1.0, 1.0, 0.3, 0.2, 10.0) == pytest.approx(1.14)
    assert dual_step(0.05, 0.0, 0.3, 0.2, 10.0) == 0.0 and dual_step(9.99, 1.0, 0.3, 0.2, 10.0) == 10.0
    assert decay(Posterior(11.0, 1.0), Posterior(1.0, 1.0), 0.5) == Posterior(6.0, 1.0)


def test_never_straggling_climbs_to_the_largest_size():
    ctrl = SAGC(SAGCConfig(initial=4))
    sizes = drive(ctrl, 20, lambda g: False)
    assert sizes[:4] == [8, 12, 16, 16] and set(sizes[3:]) == {16}
    assert ctrl.lam == 0.0


def test_straggling_large_sizes_drive_the_size_down():
    ctrl = SAGC(SAGCConfig())
    sizes = drive(ctrl, 300, lambda g: g >= 8)  # only G = 4 is safe
    tail = sizes[-100:]
    assert tail.count(4) >= 60, tail
    assert sum(g >= 8 for g in tail) / 100 <= 0.3 + 0.1


def test_only_the_largest_straggling_keeps_the_budget():
    ctrl = SAGC(SAGCConfig())
    sizes = drive(ctrl, 300, lambda g: g == 16)
    tail = sizes[-100:]
    assert tail.count(16) / 100 <= 0.3 + 0.1 and tail.count(12) >= 40, tail


def test_lambda_stays_within_bounds():
    ctrl = SAGC(SAGCConfig(eta=0.2))
    lams = []
    for _ in range(100):
        ctrl.choose()
        ctrl.end_step(1.0)
        lams.append(ctrl.lam)
    assert max(lams) == 10.0 and min(lams) > 0
    assert lams[0] == pytest.approx(0.2 * 0.7)
    for _ in range(200):  # 10 / (0.2 * 0.3) = 167 steps down to the bound
        ctrl.end_step(0.0)
        assert 0.0 <= ctrl.lam <= 10.0
    assert ctrl.lam == 0.0


@pytest.mark.parametrize("gamma, recovers", [(0.95, True), (1.0, False)])
def test_forgetting_lets_the_controller_recover(gamma, recovers):
    ctrl = SAGC(SAGCConfig(gamma=gamma))
    drive(ctrl, 200, lambda g: g >= 12)  # long completions: large groups straggle
    assert ctrl.posteriors[16].mean > 0.5 or ctrl.posteriors[12].mean > 0.5
    sizes = drive(ctrl, 200, lambda g: False)  # the length distribution changed
    assert sizes[-50:] == [16] * 50  # lambda fell to 0, so the size climbs back either way
    # only forgetting also lets the risk estimate of the large sizes come back down
    believed = max(ctrl.posteriors[12].mean, ctrl.posteriors[16].mean)
    assert (believed < 0.6) == recovers, ctrl.belief_means()


def test_state_round_trips_exactly():
    a = SAGC(SAGCConfig(seed=3))
    drive(a, 50, lambda g: g >= 12)
    state = json.loads(json.dumps(a.state_dict()))  # plain JSON-able data
    b = SAGC(SAGCConfig(seed=99))
    b.load_state_dict(state)
    assert b.state_dict() == a.state_dict()
    def script(g):
        return g == 16

    assert drive(a, 50, script) == drive(b, 50, script)
    assert a.state_dict() == b.state_dict()
