"""Attacks on a peer's network intake (issue 23), each measured beside its control in the same run, and a table.

The training attacks live in bench/attacks/catalogue.py; these need no model. A victim `SwarmDHT` runs in a process
of its own (so that its CPU time, memory and open files, with its p2pd daemon's, are its own), serving a 1 MiB bundle;
strangers are `SwarmDHT` nodes of this process speaking the wire directly.

    python -m bench.attacks.network [--only header-flood,relay] [--out bench/out/attacks-network]

Rows: header-flood (a 16 GiB length header, then up to 768 MiB of body, stream after stream), idle-streams (500
streams that send 3 bytes and stop), pull-loop (one stranger pulling as fast as it can), store-flood (one stranger
storing into the victim's DHT as fast as it can), relay (probes relayed through a peer while 8 requesters keep 2
relayed pulls each in flight for each of 8 owners that send one byte and stall), reflection (20 pulls of a peer
whose announcement names a bare address of someone else's). Writes <out>/results.json and <out>/table.md.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from node.config import SwarmConfig
from node.swarm import relay as relay_module
from node.swarm import streams as streams_module
from node.swarm.dht import SwarmDHT, bundle_handler
from node.swarm.intake import frame
from node.system.process import child_pids, rss_mb
from protocol.codec import bundle_chunks, pack_bundle

ROOT = Path(__file__).resolve().parents[2]

SWARM = "net"
BUNDLE = pack_bundle([bytes(1 << 10)] * 1000, 2 << 20)[0]  # ~1 MiB
TICK = os.sysconf("SC_CLK_TCK")


# ---- the victim, in its own process ---------------------------------------------------------------------------

def victim_main(unlimited: bool) -> int:
    node = SwarmDHT(SwarmConfig(name=SWARM))
    if unlimited:  # the control of the rate rows: no per-peer request or store rate (as before issue 23)
        for limits in (node.intake, node.stores):
            limits.rate = limits.burst = 1e9
    digest = node.serve("groups", BUNDLE)
    print(json.dumps({"peer_id": node.peer_id, "maddrs": node.visible_maddrs(), "digest": digest.hex(),
                      "pid": os.getpid()}), flush=True)
    try:
        while True:  # a line "stats" answers the intake's counters; end of input stops the victim
            line = sys.stdin.readline()
            if not line:
                break
            print(json.dumps({"refused": dict(node.intake.refused), "stores_refused": dict(node.stores.refused)}),
                  flush=True)
    finally:
        node.shutdown()
    return 0


class Victim:
    def __init__(self, unlimited: bool = False):
        self.proc = subprocess.Popen([sys.executable, __file__, "--victim", *(["--unlimited"] if unlimited else [])],
                                     stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, cwd=ROOT)
        info = json.loads(self.proc.stdout.readline())
        self.peer_id, self.maddrs, self.digest = info["peer_id"], tuple(info["maddrs"]), bytes.fromhex(info["digest"])
        self.pids = [self.proc.pid, *child_pids(self.proc.pid, "p2pd")]

    def counters(self) -> dict:
        self.proc.stdin.write("stats\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def cpu(self) -> tuple[float, float]:
        """CPU seconds of the victim's process and of its p2pd so far."""
        out = []
        for pid in self.pids[:2]:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            out.append((int(fields[11]) + int(fields[12])) / TICK)  # utime, stime
        return out[0], out[1]

    def rss(self) -> float:
        return sum(rss_mb(pid) for pid in self.pids)

    def fds(self) -> int:
        return sum(len(os.listdir(f"/proc/{pid}/fd")) for pid in self.pids)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.proc.stdin.close()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def stranger(victim_maddrs, **extra) -> SwarmDHT:
    return SwarmDHT(SwarmConfig(name=SWARM, initial_peers=tuple(victim_maddrs), **extra), bundles=False)


def cores_over(victim: Victim, seconds: float, work=None) -> tuple[float, float]:
    """Cores the victim's process and its p2pd used over `seconds` while `work(stop)` (if any) runs in a thread."""
    stop = threading.Event()
    thread = threading.Thread(target=work, args=(stop,), daemon=True) if work else None
    start_cpu, start = victim.cpu(), time.monotonic()
    if thread:
        thread.start()
    time.sleep(seconds)
    end_cpu, wall = victim.cpu(), time.monotonic() - start
    stop.set()
    if thread:
        thread.join(30)
    return (end_cpu[0] - start_cpu[0]) / wall, (end_cpu[1] - start_cpu[1]) / wall


def cores(used: tuple[float, float]) -> str:
    return f"{sum(used):.3f} cores ({used[0]:.3f} node + {used[1]:.3f} p2pd)"


def honest_pulls(node: SwarmDHT, victim: Victim, stop: threading.Event, count: list) -> None:
    while not stop.is_set():
        with contextlib.suppress(Exception):
            node.pull_async(victim.peer_id, "groups", victim.digest, 4 << 20, timeout=30,
                            maddrs=victim.maddrs).result(40)
            count[0] += 1


# ---- the rows -----------------------------------------------------------------------------------------------------

def header_flood(victim: Victim) -> dict:
    s = stranger(victim.maddrs)
    try:
        s.pull_async(victim.peer_id, "groups", victim.digest, 4 << 20, timeout=30, maddrs=victim.maddrs).result(40)
        rest = victim.rss()
        peak, pulled = [rest], [0]

        def watch(stop):
            while not stop.wait(0.1):
                peak[0] = max(peak[0], victim.rss())

        stop = threading.Event()
        threading.Thread(target=watch, args=(stop,), daemon=True).start()
        threading.Thread(target=honest_pulls, args=(s, victim, stop, pulled), daemon=True).start()
        time.sleep(20)  # control: honest pulls of the 1 MiB bundle
        stop.set()
        control = peak[0] - rest
        rest, peak[0] = victim.rss(), victim.rss()
        stop = threading.Event()
        threading.Thread(target=watch, args=(stop,), daemon=True).start()
        from hivemind.p2p import PeerID

        async def flood() -> tuple[int, int]:
            sent, streams, zeros = 0, 0, bytes(1 << 20)
            deadline = time.monotonic() + 150
            while sent < (768 << 20) and time.monotonic() < deadline:
                streams += 1
                try:
                    _, _, writer = await asyncio.wait_for(s._node.p2p.call_binary_stream_handler(
                        PeerID.from_base58(victim.peer_id), bundle_handler(SWARM)), 10)
                except Exception:  # noqa: BLE001 (refused at once: the stranger's rate or stream limit)
                    await asyncio.sleep(0.05)
                    continue
                try:
                    writer.write(b"\x00" + (16 << 30).to_bytes(8, "big"))
                    while sent < (768 << 20):
                        writer.write(zeros)
                        await asyncio.wait_for(writer.drain(), 5)
                        sent += len(zeros)
                except (ConnectionError, TimeoutError, OSError):
                    pass
                finally:
                    writer.close()
            return sent, streams

        sent, streams = s._call(flood(), timeout=300)
        time.sleep(2)
        stop.set()
        return {"attack MB": round(peak[0] - rest, 1), "control MB": round(control, 1),
                "detail": f"{sent / (1 << 20):.0f} MiB pushed over {streams} streams; honest pulls in the control "
                          f"{pulled[0]}; refused {victim.counters()['refused']}",
                "target": "victim RSS growth < 64 MB", "holds": peak[0] - rest < 64}
    finally:
        s.shutdown()


def idle_streams(victim: Victim) -> dict:
    s = stranger(victim.maddrs)
    try:
        from hivemind.p2p import PeerID

        time.sleep(1)
        rest = victim.fds()
        writers = []

        async def open_all(n: int) -> int:
            async def one():
                with contextlib.suppress(Exception):
                    _, _, writer = await asyncio.wait_for(s._node.p2p.call_binary_stream_handler(
                        PeerID.from_base58(victim.peer_id), bundle_handler(SWARM)), 20)
                    writer.write(b"\x00\x00\x00")
                    writers.append(writer)
            await asyncio.gather(*(one() for _ in range(n)))
            return len(writers)

        opened = s._call(open_all(500), timeout=120)
        time.sleep(1)
        peak = victim.fds()
        time.sleep(streams_module.REQUEST_TIMEOUT + 5)
        after = victim.fds()
        for writer in writers:
            writer.close()
        return {"attack": f"{peak} at peak, {after} after {streams_module.REQUEST_TIMEOUT + 6:.0f} s",
                "control": f"{rest} at rest",
                "detail": f"{opened} streams opened; refused {victim.counters()['refused']}",
                "target": "fds bounded, back to rest after the time-out", "holds": after <= rest + 4}
    finally:
        s.shutdown()


def pull_flood(victim: Victim, workers: int) -> tuple[tuple[float, float], tuple[float, float], list]:
    """(quiet cores, cores under one stranger's pulls from `workers` concurrent loops, [attempted, served])."""
    s = stranger(victim.maddrs)
    try:
        quiet = cores_over(victim, 15)
        pulls = [0, 0]

        def loop(stop):
            async def go():
                async def worker():
                    while not stop.is_set():
                        pulls[0] += 1
                        try:
                            await asyncio.wait_for(s._pull(victim.peer_id, "groups", b"", 4 << 20, victim.maddrs,
                                                           b"", ""), 30)
                            pulls[1] += 1
                        except Exception:  # noqa: BLE001 (refused: the rate limit)
                            await asyncio.sleep(0)
                await asyncio.gather(*(worker() for _ in range(workers)))
            s._call(go(), timeout=600)

        return quiet, cores_over(victim, 20, loop), pulls
    finally:
        s.shutdown()


def pull_loop(victim: Victim, workers: int = 1) -> dict:
    quiet, attacked, pulls = pull_flood(victim, workers)
    unlimited = Victim(unlimited=True)
    try:
        _, control, control_pulls = pull_flood(unlimited, workers)
    finally:
        unlimited.close()
    return {"attack": cores(attacked), "control": f"{cores(control)} with no rate limit; quiet {sum(quiet):.3f}",
            "detail": f"{workers} pull loop(s): {pulls[0] / 20:.0f} pulls/s attempted, {pulls[1] / 20:.1f}/s served "
                      f"(no limit: {control_pulls[1] / 20:.0f}/s served); refused {victim.counters()['refused']}",
            "target": "victim CPU within 0.1 core of quiet", "holds": sum(attacked) - sum(quiet) < 0.1}


def pull_loop_8(victim: Victim) -> dict:
    return pull_loop(victim, workers=8)


def store_flood_on(victim: Victim) -> tuple[tuple[float, float], tuple[float, float], int]:
    """One stranger storing its own signed announcement-shard record, signed once and sent again and again
    (what the schema accepts, so every store is checked in full, signature included, unless the rate refuses it
    first), 50 at a time, as fast as the victim answers."""
    from hivemind.dht.routing import DHTID
    from hivemind.dht.validation import DHTRecord
    from hivemind.p2p import PeerID

    from node.swarm.dht import announcement_kind, record_key

    s = stranger(victim.maddrs)
    try:
        quiet = cores_over(victim, 15)
        stores, proto = [0], s._node.protocol
        key = DHTID.generate(source=record_key(SWARM, announcement_kind(s.shard)))
        expiration = time.time() + 120
        signed = proto.record_validator.sign_value(DHTRecord(
            key.to_bytes(), proto.serializer.dumps(s.own_subkey), proto.serializer.dumps(b"x" * 200), expiration))

        def loop(stop):
            async def go():
                peer = PeerID.from_base58(victim.peer_id)
                while not stop.is_set():
                    await asyncio.gather(*(proto.call_store(peer, [key], [signed], [expiration],
                                                            subkeys=[s.own_subkey]) for _ in range(50)))
                    stores[0] += 50
            s._call(go(), timeout=600)

        return quiet, cores_over(victim, 20, loop), stores[0]
    finally:
        s.shutdown()


def store_flood(victim: Victim) -> dict:
    quiet, attacked, stores = store_flood_on(victim)
    refused = victim.counters()["stores_refused"]
    unlimited = Victim(unlimited=True)
    try:
        _, control, control_stores = store_flood_on(unlimited)
    finally:
        unlimited.close()
    return {"attack": cores(attacked), "control": f"{cores(control)} with no rate limit; quiet {sum(quiet):.3f}",
            "detail": f"{stores / 20:.0f} stores/s sent (no limit: {control_stores / 20:.0f}/s), refused by rate "
                      f"{refused.get('rate', 0)}",
            "target": "a stranger cannot saturate a node (well under 1 core)", "holds": sum(attacked) < 0.5}


def relay_run(owners: int, requesters: int, bounded: bool) -> tuple[int, int, dict]:
    """(probes served of 40, of 20 before the attack, what the relay refused): probes of an honest client-mode
    owner relayed through one peer while `requesters` identities each keep 2 relayed pulls in flight for each of
    `owners` identities that send a first chunk of 1 byte (of 1000 declared) and stall (issue 54, 2). Unbounded:
    the relay's limits before issue 54 (RELAY_TIMEOUT for every chunk after the first, any owner in any slot)."""
    saved = relay_module.RELAY_CHUNK, relay_module.RELAY_STRANGER_SLOTS, relay_module.RELAY_MIN_RATE
    if not bounded:
        relay_module.RELAY_CHUNK = relay_module.RELAY_TIMEOUT
        relay_module.RELAY_STRANGER_SLOTS = relay_module.RELAY_STREAMS
        relay_module.RELAY_MIN_RATE = 0
    r = SwarmDHT(SwarmConfig(name=SWARM))
    maddrs = tuple(r.visible_maddrs())
    probe = stranger(maddrs)
    honest = SwarmDHT(SwarmConfig(name=SWARM, initial_peers=maddrs, client_mode=True))
    stallers = [stranger(maddrs, client_mode=True) for _ in range(owners)]
    attackers = [stranger(maddrs) for _ in range(requesters)]
    honest_digest = honest.serve("groups", BUNDLE)
    first = bundle_chunks(b"x" * 1000)[0]
    first.data = b"x"

    async def stall(stream_info, reader, writer):
        writer.write(frame(first.SerializeToString()))
        await writer.drain()
        await asyncio.sleep(3600)

    stop = threading.Event()
    try:
        for owner in stallers:
            owner._call(owner._node.p2p.add_binary_stream_handler(bundle_handler(SWARM), stall), 30)
        r.relay_owners = {honest.peer_id: len(BUNDLE), **{o.peer_id: 1000 for o in stallers}}

        def probes(n: int) -> int:
            served = 0
            for _ in range(n):
                with contextlib.suppress(Exception):
                    got = probe.pull_async(honest.peer_id, "groups", honest_digest, 4 << 20, timeout=30,
                                           maddrs=maddrs, via=r.peer_id).result(40)
                    served += got == BUNDLE
                time.sleep(0.25)
            return served

        before = probes(20)

        def hold(node, owner):
            while not stop.is_set():
                futures = [node.pull_async(owner.peer_id, "groups", b"", 4 << 20, timeout=60, maddrs=maddrs,
                                           via=r.peer_id) for _ in range(2)]
                for f in futures:
                    with contextlib.suppress(Exception):
                        f.result(70)

        for node in attackers:
            for owner in stallers:
                threading.Thread(target=hold, args=(node, owner), daemon=True).start()
        time.sleep(2)
        attacked = probes(40)
        return attacked, before, dict(r.intake.refused)
    finally:
        stop.set()
        relay_module.RELAY_CHUNK, relay_module.RELAY_STRANGER_SLOTS, relay_module.RELAY_MIN_RATE = saved
        for node in (*attackers, *stallers, honest, probe, r):
            node.shutdown()


def relay(_victim: Victim) -> dict:
    attacked, before, refused = relay_run(8, 8, bounded=True)
    control, _, _ = relay_run(8, 8, bounded=False)
    return {"attack": f"{attacked}/40 probes served", "control": f"{control}/40 with the limits before issue 54 "
                                                                  f"({before}/20 before the attack)",
            "detail": "8 requesters x 2 relayed pulls for each of 8 owners that send 1 byte of a declared 1000 and "
                      f"stall, re-issued as they end: relay refused {refused}",
            "target": ">= 95% served", "holds": attacked >= 38}


def reflection(victim: Victim) -> dict:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    port, accepted = listener.getsockname()[1], [0]

    def accept():
        with contextlib.suppress(OSError):
            while True:
                conn, _ = listener.accept()
                accepted[0] += 1
                conn.close()

    threading.Thread(target=accept, daemon=True).start()
    s = stranger(victim.maddrs)

    def pulls(per_pull_identity: bool) -> int:  # announcements naming someone else's bare address
        before, absent = accepted[0], ""
        for _ in range(20):
            if per_pull_identity or not absent:  # an identity nobody here is connected to
                elsewhere = SwarmDHT(SwarmConfig(name=SWARM), bundles=False)
                absent = elsewhere.peer_id
                elsewhere.shutdown()
            with contextlib.suppress(Exception):
                s.pull_async(absent, "groups", b"x" * 16, 4 << 20, timeout=10,
                             maddrs=(f"/ip4/127.0.0.1/tcp/{port}",)).result(15)
        time.sleep(1)
        return accepted[0] - before

    try:
        attacked = pulls(per_pull_identity=False)
        identities = pulls(per_pull_identity=True)
        s._remember_dial = lambda *args: None  # the control: a dial per pull, as before issue 23
        control = pulls(per_pull_identity=False)
        return {"attack": f"{attacked} connection(s) for 20 pulls", "control": f"{control} without our dial limit",
                "detail": f"one identity dialled once per {streams_module.DIAL_AGAIN_AFTER:.0f} s, each dial bound to "
                          f"the "
                          f"announced id (the listener cannot pass its handshake); 20 identities naming the same "
                          f"listener: {identities} connections (one each)",
                "target": "at most one dial per identity and listener per 300 s (ghost ids: refused at the "
                          "announcement)", "holds": attacked <= 1}
    finally:
        s.shutdown()
        listener.close()


ROWS = {"header-flood": header_flood, "idle-streams": idle_streams, "pull-loop": pull_loop, "pull-loop-8": pull_loop_8,
        "store-flood": store_flood, "relay": relay, "reflection": reflection}


def table(results: dict) -> str:
    lines = ["| attack | attacked | control (same run) | target | holds | detail |", "|---|---|---|---|---|---|"]
    for name, r in results.items():
        attacked = r.get("attack") or f"{r['attack MB']} MB RSS growth"
        control = r.get("control") or f"{r['control MB']} MB RSS growth"
        lines.append(f"| {name} | {attacked} | {control} | {r['target']} | {'yes' if r['holds'] else 'NO'} | "
                     f"{r['detail']} |")
    return "\n".join(lines)


def main() -> int:
    if "--victim" in sys.argv:
        return victim_main(unlimited="--unlimited" in sys.argv)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help=f"comma-separated rows (default: all of {', '.join(ROWS)})")
    parser.add_argument("--out", default=str(ROOT / "bench" / "out" / "attacks-network"))
    args = parser.parse_args()
    names = args.only.split(",") if args.only else list(ROWS)
    unknown = [n for n in names if n not in ROWS]
    if unknown:
        parser.error(f"unknown row {', '.join(unknown)} (known: {', '.join(ROWS)})")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = {}
    for name in names:
        print(f"{name} ...", file=sys.stderr, flush=True)
        victim = Victim()  # a fresh victim per row: one row's refusals and rates do not carry into the next
        try:
            results[name] = ROWS[name](victim)
        finally:
            victim.close()
        print(f"  {results[name]}", file=sys.stderr, flush=True)
    (out / "results.json").write_text(json.dumps(results, indent=1))
    text = table(results)
    (out / "table.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
