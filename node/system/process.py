"""What a long-running node needs from its operating system: exclusive ports and identities, its own child
processes, and a stop that always ends.

- Ports: p2pd and gRPC bind with SO_REUSEPORT, so a second process on a taken port would start without an
  error and share (or steal) the first one's traffic. `ensure_port_free` probes the port without that option
  first and turns a taken port into one line.
- Identities: two processes with one identity file would be one peer id twice. `IdentityLock` holds an
  exclusive lock beside the file for the life of the process (the kernel drops it when the process dies,
  even by SIGKILL, so a restart after a crash is never refused).
- Stopping: `StopSignal` turns SIGTERM / SIGINT into an event the loops poll, and arms a watchdog that
  ends the process (after killing the p2pd daemons it started) if the graceful stop has not finished within
  `timeout` seconds, whatever the process was doing.
- Children: a process started by `SwarmProcesses` (`swarm local`, tests, benchmarks) gets its parent's PID in
  `PARENT_ENV` and stops as on SIGTERM when that parent dies, however it dies (`stop_with_parent`): a
  `swarm local` killed with -9 leaves no bootstrap, peer or p2pd behind.
"""
from __future__ import annotations

import errno
import fcntl
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from node.errors import ConfigError, IdentityInUse, PortInUse, Stopped, first_line

PARENT_ENV = "SWARM_STOP_WITH_PARENT"  # the PID whose death stops this process (set by SwarmProcesses)
PR_SET_PDEATHSIG = 1  # prctl option (linux/prctl.h): a signal for this process when its parent exits
EXIT_FORCED = 1  # exit code when the watchdog had to end the process
DEFAULT_STOP_TIMEOUT = 20.0  # seconds from a stop signal to a forced end (the CLI's --stop-timeout)


def ensure_local_address(host: str, what: str) -> None:
    """Raises ConfigError when this machine cannot listen on `host` (not one of its addresses, or not an address
    at all): said at once, where a listener would otherwise fail later or be retried for ever."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((host, 0))
        except OSError as err:
            raise ConfigError(f"{what}: {host!r} is not an address this machine can listen on ({first_line(err)}); "
                              f"use 127.0.0.1, 0.0.0.0 or one of its own addresses") from None


def ensure_port_free(host: str, port: int, what: str, host_flag: str = "") -> None:
    """Raises PortInUse when host:port is taken (port 0, any free port, is always fine), ConfigError when host is
    not an address of this machine (named `host_flag`, or `what`)."""
    ensure_local_address(host, host_flag or what)
    if port == 0:
        return
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a TIME_WAIT leftover is not an owner
        try:
            probe.bind((host, port))
        except OSError as err:
            if err.errno in (errno.EADDRINUSE, errno.EACCES):
                raise PortInUse(f"{what} port {port} on {host} is already in use by another process") from None
            raise


class IdentityLock:
    """An exclusive, non-blocking lock on `<identity>.lock`, held until `release()` or process exit."""

    def __init__(self, identity_path: str):
        self.path = Path(identity_path + ".lock")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(self._fd, 32).decode(errors="replace").strip() or "?"
            os.close(self._fd)
            raise IdentityInUse(f"identity file {identity_path} is in use by another running process "
                                f"(pid {holder}); give this process its own --identity") from None
        os.ftruncate(self._fd, 0)
        os.write(self._fd, str(os.getpid()).encode())

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)  # closing drops the lock
            self._fd = -1


def child_pids(parent: int, name: str) -> list[int]:
    """PIDs of `parent`'s direct children whose command name is `name` (Linux /proc; [] elsewhere)."""
    found = []
    for entry in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = entry.read_text()
        except OSError:
            continue
        comm = text[text.index("(") + 1: text.rindex(")")]
        ppid = int(text[text.rindex(")") + 2:].split()[1])
        if ppid == parent and comm == name:
            found.append(int(entry.parent.name))
    return found


def own_children(name: str) -> list[int]:
    """This process's direct children named `name` (the p2pd daemons it started)."""
    return child_pids(os.getpid(), name)


def rss_mb(pid: int | str, field: str = "VmRSS") -> float:
    """Resident memory of a process in MiB (Linux /proc; pid "self" for this one); field VmHWM: its peak."""
    status = Path(f"/proc/{pid}/status").read_text()
    return int(status.split(f"{field}:")[1].split()[0]) / 1024


def kill_pids(pids) -> int:
    """SIGKILLs the given processes (children this process started); returns how many were still there."""
    killed = 0
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
            killed += 1
        except ProcessLookupError:
            pass
    return killed


class StopSignal:
    """SIGTERM and SIGINT as an event (`event`): set by the first signal, which also arms a watchdog that ends
    the process `timeout` seconds later if the graceful stop has not finished by then (the time-out may be
    changed after the signal: a command reads its --stop-timeout only once its flags are parsed). A second
    Ctrl-C raises KeyboardInterrupt. Creating one installs the handlers (main thread only)."""

    def __init__(self, timeout: float = DEFAULT_STOP_TIMEOUT):
        self.event = threading.Event()
        self.timeout = timeout
        self.on_force: list[Callable[[], object]] = [lambda: kill_pids(own_children("p2pd"))]  # before exiting
        self._since = 0.0
        signal.signal(signal.SIGINT, self._handle)
        signal.signal(signal.SIGTERM, self._handle)  # (last: once it is ours, both are)

    def _handle(self, signum, frame) -> None:
        if self.event.is_set():
            if signum == signal.SIGINT:
                raise KeyboardInterrupt
            return
        self._since = time.monotonic()
        self.event.set()
        threading.Thread(target=self._watchdog, name="stop-watchdog", daemon=True).start()

    def trigger(self) -> None:
        """The stop a SIGTERM would start (e.g. our parent died before we could ask to be told)."""
        self._handle(signal.SIGTERM, None)

    def _watchdog(self) -> None:
        while time.monotonic() < self._since + self.timeout:
            time.sleep(0.05)
        print(f"swarm: did not stop within {self.timeout:.0f} s of the stop signal; exiting now", file=sys.stderr,
              flush=True)
        for end in self.on_force:  # e.g. the p2pd daemons this process started would outlive it
            end()
        os._exit(EXIT_FORCED)

    def check(self, doing: str = "starting") -> None:
        """Raises Stopped ("while <doing>") once a stop signal has arrived: start-up calls it between its slow
        parts, so a stop at any moment ends it cleanly."""
        if self.event.is_set():
            raise Stopped(f"while {doing}")


def signal_at_parent_death(signum: int = signal.SIGTERM) -> bool:
    """Asks Linux to send us `signum` when our parent process exits (the parent-death signal); returns whether
    it is set (False elsewhere than Linux). A parent that died before this call is not signalled: the caller
    compares os.getppid() with the parent it expects."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    return libc.prctl(PR_SET_PDEATHSIG, signum, 0, 0, 0) == 0


def stop_with_parent(stop: StopSignal, environ=os.environ) -> bool:
    """When `PARENT_ENV` names our parent's PID (we are one of `swarm local`'s children), its death becomes a
    SIGTERM to us (Linux's parent-death signal), which `stop` handles like any other: a clean stop. A parent
    gone before this call (we were re-parented) is the same stop at once. Returns whether the signal is set
    (False elsewhere than Linux, or without the variable)."""
    parent = environ.get(PARENT_ENV, "")
    if not parent.isdigit() or not signal_at_parent_death():
        return False
    if os.getppid() != int(parent):
        stop.trigger()
    return True


def die_with_parent(parent: int) -> None:
    """A pool worker's initializer (concurrent.futures, multiprocessing): the worker ends when `parent`, the
    process that made the pool, dies, however it dies (a SIGTERM'd or killed benchmark leaves no workers
    running its experiments); at once if it is gone already."""
    signal_at_parent_death(signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(EXIT_FORCED)
