"""node/swarm/freshness.py: a peer's freshness window in its own steps (exact values)."""
import pytest

from node.config import SwarmConfig
from node.swarm.freshness import FRESH_STEPS, Freshness, in_own_steps
from protocol import MAX_RECORD_TTL


def test_the_window_is_the_longer_of_the_configured_seconds_and_three_own_steps():
    assert FRESH_STEPS == 3
    assert in_own_steps(120.0, 10.0) == 120.0  # fast steps: the configured seconds
    assert in_own_steps(120.0, 50.0) == 150.0
    assert in_own_steps(120.0, 400.0, ceiling=600.0) == 600.0


def test_a_peers_window_follows_its_latest_step_and_never_falls_below_the_configuration():
    f = Freshness.of(SwarmConfig(max_age=120.0, record_ttl=90.0))
    assert (f.max_age, f.record_ttl) == (120.0, 90.0)
    f.own_step_took(100.0)
    assert (f.max_age, f.record_ttl) == (300.0, 300.0)
    f.own_step_took(10 * MAX_RECORD_TTL)  # a step of hours: groups judged by it, our records at the protocol's cap
    assert f.max_age == pytest.approx(30 * MAX_RECORD_TTL) and f.record_ttl == MAX_RECORD_TTL
    f.own_step_took(1.0)
    assert (f.max_age, f.record_ttl) == (120.0, 90.0)
