"""CPU time by who spends it: a thread of this process, or another process (the libp2p daemon)."""
from __future__ import annotations

import threading
import time

import psutil


class ThreadClock:
    """CPU time this thread spends inside `with clock:` blocks, added up in `seconds`."""

    def __init__(self):
        self.seconds = 0.0
        self._start = 0.0

    def __enter__(self) -> ThreadClock:
        self._start = time.thread_time()
        return self

    def __exit__(self, *exc) -> None:
        self.seconds += time.thread_time() - self._start


def thread_cpu(thread: threading.Thread | None) -> float:
    """Seconds of CPU a running thread of this process has used (0.0 for None or one not running)."""
    if thread is None or thread.ident is None or not thread.is_alive():
        return 0.0
    try:
        return time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
    except (OSError, AttributeError):  # (it ended meanwhile; or a platform without per-thread clocks)
        return 0.0


def process_cpu(pid: int | None) -> float:
    """Seconds of CPU (user + system) a process has used (0.0 when there is none, or it is gone)."""
    if pid is None:
        return 0.0
    try:
        times = psutil.Process(pid).cpu_times()
    except (psutil.Error, OSError):
        return 0.0
    return times.user + times.system
