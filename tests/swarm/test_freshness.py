"""node/swarm/freshness.py: a peer's freshness window in its own steps (exact values)."""
import pytest

from node.config import SwarmConfig
from node.swarm.freshness import FRESH_STEPS, Freshness, in_own_steps, since_updates
from protocol import MAX_RECORD_TTL


def test_the_window_is_the_longer_of_the_configured_seconds_and_three_own_steps():
    assert FRESH_STEPS == 3
    assert in_own_steps(120.0, 10.0) == 120.0  # fast steps: the configured seconds
    assert in_own_steps(120.0, 50.0) == 150.0
    assert in_own_steps(120.0, 400.0, ceiling=600.0) == 600.0


def test_a_peers_window_follows_its_latest_step_and_never_falls_below_the_configuration():
    f = Freshness.of(SwarmConfig(max_age=120.0, record_ttl=90.0))
    assert (f.max_age, f.record_ttl) == (120.0, 90.0)
    f.own_step_took(100.0, 1000.0)
    assert (f.max_age, f.record_ttl) == (300.0, 300.0)
    f.own_step_took(10 * MAX_RECORD_TTL, 2000.0)  # a step of hours: groups judged by it, ours at the protocol's cap
    assert f.max_age == pytest.approx(30 * MAX_RECORD_TTL) and f.record_ttl == MAX_RECORD_TTL
    f.own_step_took(1.0, 2001.0)
    assert (f.max_age, f.record_ttl) == (120.0, 90.0)


def test_a_group_created_after_our_third_latest_update_ended_is_fresh_however_long_we_paused():
    assert since_updates(120.0, [], 5000.0) == 120.0  # fewer than 3 updates: the seconds alone
    assert since_updates(120.0, [1000.0, 1100.0], 5000.0) == 120.0
    assert since_updates(120.0, [1000.0, 1100.0, 1200.0], 1250.0) == 250.0  # back to the end of 1000's update
    assert since_updates(300.0, [1000.0, 1100.0, 1200.0], 1250.0) == 300.0  # never below the seconds window
    f = Freshness(120.0, 90.0)
    for end in (1000.0, 1100.0, 1200.0, 1300.0):
        f.own_step_took(100.0, end)
    assert list(f.update_ends) == [1100.0, 1200.0, 1300.0]  # the latest 3
    assert f.group_window(1700.0) == 600.0  # a pause of 400 s after 1300: groups since 1100 stay fresh
    assert (f.max_age, f.record_ttl) == (300.0, 300.0)  # announcements: unchanged


def test_a_step_under_way_lengthens_the_windows_to_its_length_so_far_and_never_shortens_them():
    f = Freshness(120.0, 90.0)
    f.step_under_way(10.0)  # a short generation: the configuration
    assert (f.max_age, f.record_ttl) == (120.0, 90.0)
    f.step_under_way(100.0)  # a first step that has generated for 100 s will last at least that
    assert (f.max_age, f.record_ttl) == (300.0, 300.0)
    f.step_under_way(50.0)
    assert (f.max_age, f.record_ttl) == (300.0, 300.0)
    f.step_under_way(10 * MAX_RECORD_TTL)
    assert f.max_age == pytest.approx(30 * MAX_RECORD_TTL) and f.record_ttl == MAX_RECORD_TTL
    f.own_step_took(150.0, 1000.0)  # the step's end: its whole length decides
    assert (f.max_age, f.record_ttl) == (450.0, 450.0)
