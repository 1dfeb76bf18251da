"""Running a `swarm local` (or any child process) from a benchmark until it ends or a condition says stop."""
from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

STOP_GRACE = 120.0  # seconds a stopped swarm has to end after SIGTERM before it is killed


def run_until(cmd: list[str], cwd: Path, log: Path, stop: Callable[[], bool], longest: float,
              poll: float = 2.0) -> tuple[int, bool]:
    """Runs `cmd` (output to `log`) until it exits, `stop()` says so or `longest` seconds pass; a process we
    stop gets SIGTERM, then SIGKILL after STOP_GRACE. Returns (its exit code, whether we stopped it)."""
    deadline = time.monotonic() + longest
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=cwd)
        while proc.poll() is None and time.monotonic() < deadline and not stop():
            time.sleep(poll)
        if proc.poll() is not None:
            return proc.returncode, False
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=STOP_GRACE)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        return proc.returncode, True
