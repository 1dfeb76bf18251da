"""Network and process faults (issue points 9-12) with real `swarm bootstrap` / `swarm join` processes: a swarm
heals after a restart, a taken port or identity is one line, and SIGTERM always ends a process in bounded
time (the stop time-out), whatever it is doing, on a loaded machine too."""
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from node.local_swarm import SwarmProcesses
from node.process import child_pids

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, str(ROOT / "swarm_cli.py")]
LIGHT = ["--task", "arith-add", "--steps", "0", "--set", "train.prompts_per_step=4",
         "--set", "swarm.received_groups=4", "--set", "swarm.reannounce_every=2"]
STOP_TIMEOUT = 20  # the CLI's default --stop-timeout


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def last_peers(sp: SwarmProcesses, name: str) -> int:
    rows = sp.metrics(name)
    return rows[-1].swarm.peers if rows else -1


def wait_until(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


@pytest.fixture
def cpu_load():
    """Two busy processes: SIGTERM must work on a loaded machine too."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    yield
    for proc in procs:
        proc.kill()
        proc.wait()


def test_the_swarm_heals_after_the_bootstrap_and_then_a_peer_restart(tmp_path):
    """Point 9: the bootstrap comes back (same identity, same port) with an empty routing table; the peers'
    re-announcements teach it the swarm again, so a newcomer finds the others through it, and a peer that
    restarts with its identity (after kill -9) rejoins at once."""
    sp = SwarmProcesses(tmp_path)
    port = free_port()
    try:
        sp.start_bootstrap("--status-every", "1", port=port)
        sp.start_peer("a", "--model", "tiny-add", "--seed", "0", *LIGHT)
        sp.start_peer("b", "--model", "tiny-add-lora", "--seed", "1", *LIGHT)
        wait_until(lambda: last_peers(sp, "a") >= 1 and last_peers(sp, "b") >= 1, 120, "a and b never met")
        sp.bootstrap.kill()
        sp.bootstrap.wait()
        sp.bootstrap_lines.clear()
        sp.start_bootstrap("--status-every", "1", port=port)  # same identity file, same port
        wait_until(lambda: any(ln.startswith("status: 2 peers") for ln in sp.bootstrap_lines), 60,
                   f"the restarted bootstrap never saw the peers again: {sp.bootstrap_lines[-3:]}")
        sp.start_peer("newcomer", "--model", "tiny-add", "--seed", "2", *LIGHT)
        wait_until(lambda: last_peers(sp, "newcomer") >= 2, 90, "the newcomer stayed isolated")
        sp.peers["b"].kill()  # kill -9: no withdrawal, no clean shutdown
        sp.peers["b"].wait()
        sp.start_peer("b", "--model", "tiny-add-lora", "--seed", "1", *LIGHT)  # same identity
        wait_until(lambda: last_peers(sp, "b") >= 2, 90, f"the restarted peer stayed isolated: {sp.log_tail('b')}")
        assert any(r.swarm.groups_used > 0 for r in sp.metrics("b")[-5:])
    finally:
        sp.stop()


def test_taken_ports_are_one_line(tmp_path):
    """Point 10: p2pd and gRPC share ports silently (SO_REUSEPORT); a second process must not."""
    sp = SwarmProcesses(tmp_path)
    port, control = free_port(), free_port()
    try:
        sp.start_bootstrap("--control-port", str(control), port=port)
        attempts = {
            "bootstrap, DHT port": ["bootstrap", "--port", str(port), "--identity", str(tmp_path / "x.id")],
            "bootstrap, control port": ["bootstrap", "--port", "0", "--identity", str(tmp_path / "y.id"),
                                        "--control-port", str(control)],
            "join, DHT port": ["join", "--initial-peers", sp.address, "--port", str(port), "--steps", "1"],
            "join, control port": ["join", "--initial-peers", sp.address, "--control-port", str(control),
                                   "--steps", "1"],
        }
        for what, args in attempts.items():
            out = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120, cwd=ROOT, check=False)
            lines = out.stderr.strip().splitlines()
            assert out.returncode == 2 and "already in use" in lines[-1], (what, out.stderr[-2000:])
            assert "Traceback" not in out.stderr, what
        status = subprocess.run([*CLI, "status", f"127.0.0.1:{control}"], capture_output=True, text=True,
                                timeout=60, check=False)
        assert status.stdout.startswith("bootstrap ")  # the first owner still answers on its port
    finally:
        sp.stop()


@pytest.fixture
def running_peer(tmp_path, wait_steps):
    """A bootstrap and one peer "a" that has done a few steps."""
    sp = SwarmProcesses(tmp_path)
    try:
        sp.start_bootstrap()
        sp.start_peer("a", "--model", "tiny-add", *LIGHT)
        wait_steps(sp, "a", 3, timeout=120)
        yield sp
    finally:
        sp.stop()


def test_an_identity_held_by_a_running_peer_is_refused_at_once(running_peer):
    """Point 11: not retried as 'unreachable swarm', not joined twice under one peer id."""
    start = time.monotonic()
    out = subprocess.run([*CLI, "join", "--initial-peers", running_peer.address, "--identity",
                          str(running_peer.out / "a.id"), "--steps", "1"],
                         capture_output=True, text=True, timeout=120, cwd=ROOT, check=False)
    assert out.returncode == 2, out.stderr[-2000:]
    last = out.stderr.strip().splitlines()[-1]
    assert "is in use by another running process" in last and "retrying" not in out.stderr
    assert time.monotonic() - start < 60


def sigterm_after(cmd: list[str], delay: float, cwd=ROOT) -> tuple[int, float, str]:
    """Starts cmd, sends SIGTERM after `delay` s; returns (exit code, seconds to exit, output)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=cwd)
    time.sleep(delay)
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        out, _ = proc.communicate(timeout=STOP_TIMEOUT + 40)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        raise AssertionError(f"still running {STOP_TIMEOUT + 40} s after SIGTERM: {out[-2000:]}") from None
    return proc.returncode, time.monotonic() - sent, out


@pytest.mark.parametrize("delay", [0.5, 1.5, 3.0, 6.0])
def test_sigterm_stops_a_bootstrap_in_every_state(tmp_path, cpu_load, delay):
    """Point 12: starting, fetching (a status fetch every 0.2 s), idle; on a loaded machine."""
    code, seconds, out = sigterm_after([*CLI, "bootstrap", "--port", "0", "--identity", str(tmp_path / "b.id"),
                                        "--status-every", "0.2"], delay)
    assert code == 0 and seconds < STOP_TIMEOUT, (code, seconds, out[-2000:])
    assert out.strip().splitlines()[-1].startswith("bootstrap stopped") and "Traceback" not in out


def test_sigterm_stops_a_peer_while_it_retries(cpu_load):
    dead = f"/ip4/127.0.0.1/tcp/{free_port()}/p2p/12D3KooWRqLQJmN9WhyZ4YdbM3kEiY4J2TMgnchPKQty6eFJuiGx"
    code, seconds, out = sigterm_after([*CLI, "join", "--initial-peers", dead, "--startup-timeout", "3"], 15)
    assert code == 0 and seconds < STOP_TIMEOUT and "stopped while" in out and "Traceback" not in out, out[-2000:]


def test_sigterm_stops_a_peer_while_it_trains(running_peer, cpu_load):
    peer = running_peer.peers["a"]
    sent = time.monotonic()
    peer.send_signal(signal.SIGTERM)
    assert peer.wait(timeout=STOP_TIMEOUT + 40) == 0 and time.monotonic() - sent < STOP_TIMEOUT
    log = running_peer.log_tail("a", 40)
    assert "stopped: summary of the steps done so far" in log and "Traceback" not in log


def test_a_stop_that_cannot_finish_is_forced_at_the_stop_timeout(tmp_path):
    """A peer in the middle of a step far longer than its --stop-timeout: the watchdog ends it (and the p2pd
    daemon it started) at the time-out, with one line saying so."""
    sp = SwarmProcesses(tmp_path)
    try:
        sp.start_bootstrap()
        proc = sp.start_peer("slow", "--model", "small-add", "--task", "arith-add", "--steps", "0",
                             "--set", "train.prompts_per_step=3000", "--stop-timeout", "3")
        wait_until(lambda: "joined swarm" in sp.log_tail("slow", 40), 120, sp.log_tail("slow"))
        time.sleep(1.0)  # inside its first (very long) step
        daemons = child_pids(proc.pid, "p2pd")
        assert daemons, "no p2pd child found"
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 1
        assert 2.5 < time.monotonic() - sent < 15
        assert "did not stop within 3 s" in sp.log_tail("slow")
        wait_until(lambda: all(_gone(pid) for pid in daemons), 10, "the p2pd daemon outlived its peer")
    finally:
        sp.stop()


def _gone(pid: int) -> bool:
    """Exited (a zombie waiting for init to reap it counts: it was killed)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True
