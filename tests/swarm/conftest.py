"""Helpers of the process-level swarm tests."""
import time

import pytest

from node.app.local_swarm import SwarmProcesses


def _wait_steps(sp: SwarmProcesses, name: str, steps: int, timeout: float):
    """Metrics of peer `name` once it has done `steps` steps in all; fails when it died or ran out of time."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = sp.metrics(name)
        if len(rows) >= steps:
            return rows
        if sp.peers[name].poll() is not None:
            raise AssertionError(f"{name} exited with {sp.peers[name].returncode}: {sp.log_tail(name)}")
        time.sleep(0.2)
    raise AssertionError(f"{name} did not reach {steps} steps in {timeout:.0f} s: {sp.log_tail(name)}")


@pytest.fixture(scope="session")
def wait_steps():
    return _wait_steps
