"""Long-running loops behind the CLI: a training peer (alone or in a swarm) and the bootstrap daemon.

Both stop cleanly on SIGTERM / Ctrl-C (node/system/process.py): the current step finishes, records are withdrawn,
the DHT and the control server shut down; a stop that takes longer than the stop time-out is forced. Joining
retries an unreachable bootstrap with exponential back-off.
"""
from __future__ import annotations

import collections
import hashlib
import logging
import random
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from node.config import SwarmConfig
from node.errors import Stopped, SwarmUnreachable, first_line
from node.metrics import StepResult
from node.swarm.control import ControlServer, NodeStatus
from protocol import ANNOUNCE_SHARDS

if TYPE_CHECKING:
    from node.peer import Peer

log = logging.getLogger(__name__)
SEED_ROUND = 2.0  # seconds between the bootstrap's view rounds (node/swarm/seeding.py)


def backoff_delays(first: float = 2.0, factor: float = 2.0, cap: float = 60.0):
    delay = first
    while True:
        yield delay
        delay = min(delay * factor, cap)


def connect(settings: SwarmConfig, attempts: int, stop: threading.Event, sleep: Callable[[float], bool] | None = None):
    """A SwarmDHT, retrying an unreachable swarm `attempts` times (0: until stopped) with back-off; raises
    Stopped when `stop` is set meanwhile."""
    from node.swarm.dht import SwarmDHT

    wait = sleep or stop.wait
    for attempt, delay in enumerate(backoff_delays(), start=1):
        try:
            return SwarmDHT(settings, stop=stop)
        except SwarmUnreachable as err:
            if attempts and attempt >= attempts:
                raise
            log.warning("%s; retrying in %.0f s (attempt %d%s)", err, delay, attempt,
                        f"/{attempts}" if attempts else "")
            if wait(delay) and stop.is_set():
                raise Stopped("while retrying to join the swarm") from None
    raise AssertionError("unreachable")


def train_loop(peer: Peer, steps: int, stop: threading.Event, on_step: Callable[[StepResult], None],
               status: NodeStatus | None = None, start: int = 0) -> int:
    """Runs steps from `start` until `steps` (0: forever) or stop; returns the steps done in all. Keeps no
    per-step list: each result goes to `on_step` (progress, metrics file, RunLog, checkpoints) and is dropped."""
    recent = collections.deque(maxlen=20)
    step = start
    while not stop.is_set() and (steps == 0 or step < steps):
        result = peer.step(step)
        recent.append(result.reward)
        if status is not None:
            update_status(status, result, recent)
            status.peer_list = peer.known_peers()
            status.credit = peer.credit()
        on_step(result)
        step += 1
    return step


def update_status(status: NodeStatus, result: StepResult, recent) -> None:
    status.step = result.step + 1
    status.group_size = result.group_size
    status.reward = sum(recent) / len(recent)
    status.lam = result.group.lam
    status.peers = result.swarm.peers
    if result.eval:
        status.accuracy, status.accuracy_step = dict(result.eval), result.step + 1


class SwarmWatch:
    """What the bootstrap daemon sees: live peers (their announcements) and groups announced per minute."""

    def __init__(self, window: float = 60.0):
        self.window = window
        self.seen: dict[bytes, str] = {}  # subkey -> digest of its last announcement
        self.announcements: dict = {}  # subkey -> its last decoded announcement
        self.read_at: dict[bytes, float] = {}  # subkey -> our time when its last announcement was first read
        self.events: collections.deque = collections.deque()  # (time, groups in a new bundle)

    def observe(self, records: dict, now: float) -> None:
        from protocol.codec import RecordError, decode_announcement

        for subkey, (value, _) in records.items():
            digest = hashlib.sha256(value).hexdigest()
            if self.seen.get(subkey) != digest:
                self.seen[subkey] = digest
                try:
                    self.announcements[subkey] = decode_announcement(value)
                except RecordError:
                    self.announcements.pop(subkey, None)
                    continue
                self.read_at[subkey] = now
                self.events.append((now, self.announcements[subkey].groups.records))
        while self.events and self.events[0][0] < now - self.window:
            self.events.popleft()
        for subkey in [k for k in self.seen if k not in records]:
            del self.seen[subkey]
            self.announcements.pop(subkey, None)
            self.read_at.pop(subkey, None)

    def peer_list(self, now: float) -> list[dict]:
        """The publishing peers, the one whose announcement we read last first (our clock, not their stamps)."""
        from node.swarm.control import peer_info

        order = sorted(self.announcements, key=lambda k: -self.read_at.get(k, 0.0))
        return [peer_info(self.announcements[k], now - self.read_at.get(k, now)) for k in order]

    def groups_per_minute(self) -> float:
        return sum(n for _, n in self.events) * 60.0 / self.window


def read_address_file(path: str, timeout: float, stop: threading.Event) -> list[str]:
    """Multiaddrs from a file a bootstrap wrote, waiting up to `timeout` seconds for it to appear (Stopped when
    `stop` is set meanwhile)."""
    deadline = time.monotonic() + timeout
    file = Path(path)
    while not file.exists() or not file.read_text().strip():
        if time.monotonic() >= deadline:
            raise SwarmUnreachable(f"no bootstrap address file at {path} after {timeout:.0f} s")
        if stop.wait(0.5):
            raise Stopped(f"while waiting for the bootstrap's address file {path}")
    return [line.strip() for line in file.read_text().splitlines() if line.strip()]


def run_bootstrap(settings, status_every: float, control_port: int, stop: threading.Event,
                  say: Callable[[str], None], address_file: str | None = None,
                  dashboard: Callable[[NodeStatus], object] | None = None) -> int:
    """A DHT-only node that others join through; prints its addresses, then a status line periodically.
    `dashboard`: starts a web dashboard of this status (returns it, or None; closed at the end)."""
    from node.swarm.dht import SwarmDHT

    status = NodeStatus(role="bootstrap")
    # first: a taken control port fails before the DHT starts
    server = ControlServer(lambda: status, port=control_port, serving=False) if control_port >= 0 else None
    board = None
    try:
        board = dashboard(status) if dashboard is not None else None
        # a DHT node that serves only its view (peer sampling: newcomers pull it first), or nothing
        dht = SwarmDHT(settings, stop=stop, bundles=settings.gossip, relays=False)
        try:
            status.peer_id, status.maddrs = dht.peer_id, dht.visible_maddrs()
            for maddr in status.maddrs:
                say(f"bootstrap address: {maddr}")
            if address_file:
                Path(address_file).parent.mkdir(parents=True, exist_ok=True)
                tmp = Path(address_file + ".tmp")
                tmp.write_text("".join(m + "\n" for m in status.maddrs))
                tmp.replace(address_file)  # atomic: a reader never sees half a file
            if server:
                server.set_serving(True)
                say(f"control API on 127.0.0.1:{server.port}")
            if board is not None:  # (said once the node is up: a taken DHT port is then the only line)
                say(f"dashboard on {board.url}")
            watch_swarm(dht, status, status_every, stop, say, gossip=settings.gossip)
        finally:
            dht.shutdown()
    finally:
        if server:
            server.stop()
        if board is not None:
            board.close()
    say("bootstrap stopped")
    return 0


def watch_swarm(dht, status: NodeStatus, every: float, stop: threading.Event, say: Callable[[str], None],
                gossip: bool = True) -> None:
    """The bootstrap's loop until stopped: with peer sampling, a round of its view (node/swarm/seeding.py) every
    SEED_ROUND seconds, whose directory reads (a rotation) also feed the status; a status line every `every`
    seconds. Without, a read of the whole directory for each status line. A failing read (whatever the network
    or hivemind raises) is a log line, never the end of the daemon."""
    from node.swarm.seeding import SeedView
    from node.swarm.swarm_task import majority

    watch = SwarmWatch()
    seeds = SeedView(dht, dht.settings, random.Random()) if gossip else None
    tick = min(every, SEED_ROUND) if seeds is not None else every
    next_status = time.monotonic() + every
    while not stop.wait(tick):
        if seeds is not None:
            try:
                seeds.round()
            except Exception as err:  # noqa: BLE001 (the daemon outlives any round)
                log.warning("the view's round failed: %s", first_line(err))
            if time.monotonic() < next_status:
                continue
            next_status = time.monotonic() + every
            records = seeds.live()
        else:
            try:
                records = dht.fetch_shards_async(list(range(ANNOUNCE_SHARDS))).result(30)
            except Exception as err:  # noqa: BLE001 (the daemon outlives any fetch)
                log.warning("status fetch failed: %s", first_line(err))
                continue
        now = time.monotonic()  # (one clock for the reads and their ages: the DHT's is another)
        watch.observe(records, now)
        status.peers = seeds.estimate() if seeds is not None else len(watch.seen)
        status.groups_per_minute = watch.groups_per_minute()
        status.peer_list = watch.peer_list(now)
        found = majority(watch.announcements.values())
        status.task = found.describe() if found.task is not None else ""
        say(f"status: {status.peers} peers publishing, {status.groups_per_minute:.0f} groups/min, "
            f"up {time.monotonic() - status.started:.0f} s" + (f", task {status.task}" if status.task else ""))
