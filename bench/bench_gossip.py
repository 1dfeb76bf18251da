"""What gossip costs a peer as the swarm grows: the retired single-key exchange (every peer's bundle under one
DHT key, every peer fetching that key each step), measured on the wire.

One reader runs in its own network namespace (a veth pair to this host, 10.77.0.2 <-> 10.77.0.1), so the
namespace's interface counters give its real wire bytes, p2pd included; N publishers (SwarmDHT nodes in one
helper process, the first also the bootstrap) each publish a fresh, valid bundle of groups and one of
summaries every period. Per N the table shows, over the measured steps: the bytes the reader received per
step, the payload it fetched (the values of all subkeys) and the share of it that was new, the ratio of wire
bytes to new payload, the largest DHT value (all subkeys of the groups key), how often a fetch saw every
publisher, and fetch latency (median, p95).

Needs root (network namespaces); cleans up its namespace and processes on exit.

    .venv/bin/python bench/bench_gossip.py [--peers 5,10,20] [--steps 12] [--groups 8] [--tokens 64]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

NS, HOST_IF, NS_IF = "swarm-gossip-bench", "sgb-host", "sgb-ns"
HOST_IP, NS_IP = "10.77.0.1", "10.77.0.2"
SWARM = "gossip-bench"


# ---- the namespace ----------------------------------------------------------------------------------------
def sh(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True)


def make_namespace() -> None:
    remove_namespace()
    sh("ip", "netns", "add", NS)
    sh("ip", "link", "add", HOST_IF, "type", "veth", "peer", "name", NS_IF)
    sh("ip", "link", "set", NS_IF, "netns", NS)
    sh("ip", "addr", "add", f"{HOST_IP}/24", "dev", HOST_IF)
    sh("ip", "link", "set", HOST_IF, "up")
    sh("ip", "netns", "exec", NS, "ip", "addr", "add", f"{NS_IP}/24", "dev", NS_IF)
    sh("ip", "netns", "exec", NS, "ip", "link", "set", NS_IF, "up")
    sh("ip", "netns", "exec", NS, "ip", "link", "set", "lo", "up")


def remove_namespace() -> None:
    subprocess.run(["ip", "link", "del", HOST_IF], capture_output=True, check=False)
    subprocess.run(["ip", "netns", "del", NS], capture_output=True, check=False)


def interface_bytes(name: str) -> tuple[int, int]:
    """(received, sent) bytes of an interface, from /proc/net/dev of the current namespace."""
    for line in Path("/proc/net/dev").read_text().splitlines():
        if line.strip().startswith(name + ":"):
            fields = line.split(":", 1)[1].split()
            return int(fields[0]), int(fields[8])
    raise RuntimeError(f"no interface {name}")


# ---- synthetic but valid records --------------------------------------------------------------------------
def bundles(seed: int, step: int, groups: int, tokens: int) -> tuple[bytes, bytes]:
    import numpy as np

    from protocol.codec import (
        LengthSummary,
        WireCard,
        WireCompletion,
        WireGroup,
        encode_group,
        encode_summary,
        pack_bundle,
    )

    rng = np.random.default_rng([seed, step])
    card = WireCard("qwen2", 494_000_000, False, "bench", 151_665, "transformers", 1.0, 1.0, "bench")
    records, sums = [], []
    for _ in range(groups):
        comps = [WireCompletion(rng.integers(0, 151_665, tokens).tolist(), (-rng.exponential(1, tokens)).tolist(),
                                "length") for _completion in range(8)]
        records.append(encode_group(WireGroup("arith", "1", "train", int(rng.integers(2**31)), [1, 2, 3], comps, card,
                                              step=step, created=time.time())))
        sums.append(encode_summary(LengthSummary(8, tokens, float(tokens), float(tokens), 8 * tokens, 0.1, "qwen2",
                                                 step)))
    return pack_bundle(records, 3 << 20)[0], pack_bundle(sums, 1 << 18)[0]


# ---- the two roles ----------------------------------------------------------------------------------------
def legacy_dht(settings):
    """A DHT node that stores bundles under one key per kind, as the retired single-key exchange did (the
    project's nodes now refuse such records: their schema admits only small announcements)."""
    import asyncio

    from node.swarm.dht import SwarmDHT, live_values, record_key

    class LegacyDHT(SwarmDHT):
        max_value_bytes = 3 << 20

        def _validators(self) -> list:
            return [self.validator]

        def fetch_async(self, kind: str):
            """Every other node's value under the kind's one key, as the single-key exchange read it."""
            async def fetch():
                found = await self._node.get(record_key(SWARM, kind), latest=True)
                return live_values(found.value, self.own_subkey) if found is not None else {}

            return asyncio.run_coroutine_threadsafe(fetch(), self._loop)

    return LegacyDHT(settings)


def publish(n: int, period: float, groups: int, tokens: int) -> int:
    """N publishers in this process; prints the first one's address, then publishes until killed."""
    from node.config import SwarmConfig

    nodes = [legacy_dht(SwarmConfig(name=SWARM, host=HOST_IP))]
    first = [m for m in nodes[0].visible_maddrs() if HOST_IP in m][0]
    print(first, flush=True)
    nodes += [legacy_dht(SwarmConfig(name=SWARM, host=HOST_IP, initial_peers=(first,))) for _ in range(n - 1)]
    print("ready", flush=True)
    step = 0
    while True:
        started = time.monotonic()
        for i, node in enumerate(nodes):
            groups_bundle, summaries_bundle = bundles(i, step, groups, tokens)
            node.publish_async("groups", groups_bundle, 60)
            node.publish_async("summaries", summaries_bundle, 60)
        step += 1
        time.sleep(max(period - (time.monotonic() - started), 0.05))


def read(initial: str, steps: int, period: float, n: int) -> int:
    """The reader (inside the namespace): one fetch of each kind per step, as the exchange does; one JSON line
    per step."""
    from node.config import SwarmConfig

    dht = legacy_dht(SwarmConfig(name=SWARM, host=NS_IP, initial_peers=(initial,)))
    seen: set[bytes] = set()
    try:
        for step in range(steps + 2):  # two warm-up steps
            before = interface_bytes(NS_IF)
            started = time.monotonic()
            futures = {kind: dht.fetch_async(kind) for kind in ("groups", "summaries")}
            found = {kind: future.result(30) for kind, future in futures.items()}
            latency = time.monotonic() - started
            values = [v for records in found.values() for v, _ in records.values()]
            new = [v for v in values if hash(v) not in seen]
            seen.update(hash(v) for v in values)
            time.sleep(0.3)  # late replies land in this step's counters
            after = interface_bytes(NS_IF)
            print(json.dumps({"step": step, "rx": after[0] - before[0], "tx": after[1] - before[1],
                              "payload": sum(map(len, values)), "new": sum(map(len, new)),
                              "largest": sum(len(v) for v, _ in found["groups"].values()),
                              "complete": len(found["groups"]) == n, "latency": latency}), flush=True)
            time.sleep(max(period - (time.monotonic() - started), 0.05))
    finally:
        dht.shutdown()
    return 0


# ---- the driver -------------------------------------------------------------------------------------------
def measure(n: int, args) -> dict:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    me = [sys.executable, str(Path(__file__).resolve())]
    publishers = subprocess.Popen([*me, "--publish", str(n), "--groups", str(args.groups), "--tokens",
                                   str(args.tokens), "--period", str(args.period)], stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, text=True, env=env)
    try:
        first = publishers.stdout.readline().strip()
        if publishers.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the {n} publishers did not start")
        out = subprocess.run(["ip", "netns", "exec", NS, *me, "--read", first, "--peers", str(n), "--steps",
                              str(args.steps), "--period", str(args.period)], capture_output=True, text=True,
                             env=env, timeout=600, check=False)
        rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")][2:]
        if not rows:
            raise RuntimeError(f"the reader measured nothing: {out.stderr[-2000:]}")
    finally:
        publishers.terminate()
        try:
            publishers.wait(60)
        except subprocess.TimeoutExpired:
            publishers.kill()
    med = statistics.median
    return {"peers": n, "rx_step": med(r["rx"] for r in rows), "payload_step": med(r["payload"] for r in rows),
            "new_step": med(r["new"] for r in rows), "largest": max(r["largest"] for r in rows),
            "complete": sum(r["complete"] for r in rows) / len(rows),
            "latency": med(r["latency"] for r in rows),
            "latency_p95": sorted(r["latency"] for r in rows)[int(0.95 * (len(rows) - 1))]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peers", default="5,10,20", help="publisher counts to measure")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--period", type=float, default=1.0, help="seconds between publishes and reads")
    parser.add_argument("--groups", type=int, default=8, help="groups of 8 completions in a bundle")
    parser.add_argument("--tokens", type=int, default=64, help="tokens in a completion")
    parser.add_argument("--publish", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--read", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.publish:
        return publish(args.publish, args.period, args.groups, args.tokens)
    if args.read:
        return read(args.read, args.steps, args.period, int(args.peers))
    if os.geteuid() != 0:
        parser.error("needs root: the reader runs in its own network namespace")
    from node.runtime import quiet_libraries

    quiet_libraries()
    make_namespace()
    try:
        rows = []
        for n in (int(x) for x in args.peers.split(",")):
            print(f"measuring {n} publishers ...", file=sys.stderr, flush=True)
            rows.append(measure(n, args))
    finally:
        remove_namespace()
    print(f"single-key exchange: bundles of {args.groups} groups x 8 x {args.tokens} tokens, one per publisher "
          f"per {args.period:g} s; medians over {args.steps} steps")
    print(f"{'peers':>5} {'wire KB/step':>12} {'payload KB':>10} {'new KB':>7} {'wire/new':>8} "
          f"{'largest value KB':>16} {'complete':>8} {'fetch ms':>8} {'p95 ms':>7}")
    for r in rows:
        ratio = r["rx_step"] / r["new_step"] if r["new_step"] else float("inf")
        print(f"{r['peers']:>5} {r['rx_step'] / 1e3:>12.1f} {r['payload_step'] / 1e3:>10.1f} "
              f"{r['new_step'] / 1e3:>7.1f} {ratio:>8.1f} {r['largest'] / 1e3:>16.1f} {r['complete']:>8.0%} "
              f"{r['latency'] * 1e3:>8.0f} {r['latency_p95'] * 1e3:>7.0f}")
    base = rows[0]
    for r in rows[1:]:
        print(f"wire bytes per step, {r['peers']} vs {base['peers']} peers: {r['rx_step'] / base['rx_step']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
