"""CPU by who spends it (node/system/cpu.py): a thread's own clock, another process's times."""
import os
import subprocess
import sys
import threading
import time

from node.system.cpu import ThreadClock, process_cpu, thread_cpu


def test_a_busy_thread_is_charged_its_own_cpu_and_an_idle_one_next_to_none():
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            sum(range(1000))

    busy, idle = threading.Thread(target=spin), threading.Thread(target=stop.wait)
    busy.start()
    idle.start()
    try:
        start = thread_cpu(busy)
        deadline = time.monotonic() + 60
        while thread_cpu(busy) - start < 0.2 and time.monotonic() < deadline:  # (bounded: a loaded machine)
            time.sleep(0.05)
        assert thread_cpu(busy) - start >= 0.2
        assert thread_cpu(idle) < 0.1
    finally:
        stop.set()
        busy.join()
        idle.join()
    assert thread_cpu(busy) == 0.0 and thread_cpu(None) == 0.0  # ended, or none


def test_another_processs_cpu_is_read_and_a_gone_one_is_zero():
    child = subprocess.Popen([sys.executable, "-c", "import time\nt = time.process_time()\n"
                              "while time.process_time() - t < 0.3: pass\nimport sys; sys.stdin.read()"],
                             stdin=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while process_cpu(child.pid) < 0.3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert process_cpu(child.pid) >= 0.3
    finally:
        child.communicate(b"")
    assert process_cpu(child.pid) == 0.0 and process_cpu(None) == 0.0
    assert process_cpu(os.getpid()) > 0


def test_a_thread_clock_adds_up_the_cpu_of_its_blocks_only():
    clock = ThreadClock()
    for _ in range(2):
        with clock:
            start = time.thread_time()
            while time.thread_time() - start < 0.05:  # (CPU, not wall: the same on a loaded machine)
                pass
    inside = clock.seconds
    start = time.thread_time()
    while time.thread_time() - start < 0.2:  # outside any block: not counted
        pass
    assert 0.1 <= inside < 0.2 and clock.seconds == inside
