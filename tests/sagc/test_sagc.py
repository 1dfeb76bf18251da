"""SAGC controller: scripted straggler outcomes with exact or bounded expectations."""
import json

import pytest

from node.config import SAGCConfig
from node.sagc.controller import SAGC, Posterior, decay, dual_step, size_cost, straggles, value


def drive(ctrl, steps, straggles, seconds=None):
    """Runs the controller against a scripted outcome per size (and, given `seconds`, a scripted generation
    time per size); returns the chosen sizes."""
    sizes = []
    for _ in range(steps):
        g = ctrl.choose()
        s = straggles(g)
        ctrl.observe(g, s)
        if seconds:
            ctrl.observe_cost(g, seconds(g))
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


def test_a_size_is_priced_by_its_measured_seconds_or_the_nearest_ones():
    assert size_cost({}, 8) is None
    assert size_cost({16: 2.0}, 8) == 1.0 and size_cost({16: 2.0, 4: 1.0}, 12) == 1.5  # 12 is nearest to 16
    assert size_cost({4: 1.0, 12: 3.0}, 8) == 2.0  # a tie: the smaller size's figure
    assert value(8, 16, {16: 2.0}, price_time=True) == pytest.approx(3 * 2.0 / 1.0)
    assert value(16, 16, {16: 2.0}, price_time=True) == 4.0  # the current size: log2 G either way
    assert value(8, 16, {16: 2.0}, price_time=False) == 3.0 and value(8, 16, {}, price_time=True) == 3.0
    ctrl = SAGC(SAGCConfig(gamma=0.5))
    for seconds in (2.0, 4.0, float("nan"), -1.0, 0.0):
        ctrl.observe_cost(16, seconds)
    ctrl.observe_cost(5, 1.0)  # not a candidate
    assert ctrl.costs == {16: 3.0}


def test_where_seconds_grow_with_the_size_it_settles_on_the_cheapest_value():
    """Generation seconds in proportion to G (a CPU at a fixed prompt count): log2(G) / G is largest at the
    smallest size, so without a straggler it walks down from 16 and stays at 4. At flat seconds (a GPU far
    from full) the untried smaller sizes look cheap until each is measured once; then it climbs back to 16 and
    stays, as the unpriced controller does."""
    down = drive(SAGC(SAGCConfig()), 12, lambda g: False, seconds=lambda g: 0.1 * g)
    assert down[:5] == [16, 12, 8, 4, 4] and set(down[3:]) == {4}  # (nothing measured: unpriced)
    flat = drive(SAGC(SAGCConfig()), 12, lambda g: False, seconds=lambda g: 1.0)
    assert flat[:7] == [16, 12, 8, 4, 8, 12, 16] and set(flat[6:]) == {16}
    unpriced = drive(SAGC(SAGCConfig(price_time=False)), 12, lambda g: False, seconds=lambda g: 0.1 * g)
    assert set(unpriced) == {16}


def test_state_round_trips_exactly():
    a = SAGC(SAGCConfig(seed=3))
    drive(a, 50, lambda g: g >= 12, seconds=lambda g: 0.05 * g + 0.2)
    state = json.loads(json.dumps(a.state_dict()))  # plain JSON-able data
    b = SAGC(SAGCConfig(seed=99))
    b.load_state_dict(state)
    assert b.state_dict() == a.state_dict()
    def script(g):
        return g == 16

    assert drive(a, 50, script) == drive(b, 50, script)
    assert a.state_dict() == b.state_dict()
