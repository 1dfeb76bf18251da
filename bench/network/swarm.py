"""Cost of the swarm, in one run: per-step overhead, publish-to-visible latency, peak memory.

1. Latency: two DHT nodes on loopback; one publishes a realistic group bundle, the other polls until it sees
   it (5 ms polls): median and p95 over repeats.
2. The default local swarm (`swarm local`: bootstrap + 4 zoo peers as processes): per-step swarm overhead
   (encode, publish, gather, decode, validate, re-score; waiting between polls reported apart) as a share
   of step time, and the peak resident memory of all its processes together (sampled every 0.5 s).

    python -m bench.network.swarm [--repeats 40] [--steps 40] [--peers 4]
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import psutil

from node.app.local_swarm import read_metrics
from node.config import SwarmConfig
from node.swarm.dht import SwarmDHT
from protocol.codec import WireCard, WireCompletion, WireGroup, encode_group, pack_bundle

ROOT = Path(__file__).resolve().parents[2]


def bundle(step: int, groups: int = 8, g: int = 8, tokens: int = 64) -> bytes:
    rng = np.random.default_rng(step)
    card = WireCard("qwen2", 1, False, "fp", 99, "transformers", 1.0, 1.0, "0")
    records = []
    for i in range(groups):
        comps = [WireCompletion(rng.integers(3, 99, tokens).tolist(), (-rng.exponential(1, tokens)).tolist(),
                                "length") for _ in range(g)]
        records.append(encode_group(WireGroup("arith", "1", "train", i, [5, 6], comps, card, step=step)))
    return pack_bundle(records, 3 * 1024 * 1024)[0]


def latency(repeats: int) -> list[float]:
    a = SwarmDHT(SwarmConfig(name="bench"))
    b = SwarmDHT(SwarmConfig(name="bench", initial_peers=tuple(a.visible_maddrs())))
    times = []
    try:
        for step in range(repeats):  # serve + announce at a; b reads a's shard, then pulls the bundle
            value = bundle(step)
            start = time.perf_counter()
            digest = a.serve("groups", value)
            a.announce_async(digest, ttl=30)
            while b.fetch_shards_async([a.shard]).result(10).get(a.own_subkey, (b"",))[0] != digest:
                if time.perf_counter() - start > 10:
                    raise TimeoutError("announcement not visible after 10 s")
                time.sleep(0.005)
            assert b.pull_async(a.peer_id, "groups", digest, 8 << 20, timeout=10).result(15) == value
            times.append(time.perf_counter() - start)
    finally:
        b.shutdown()
        a.shutdown()
    return times


def tree_rss(root: psutil.Process) -> int:
    total = 0
    for proc in [root, *root.children(recursive=True)]:
        try:
            total += proc.memory_info().rss
        except psutil.NoSuchProcess:
            continue
    return total


def local_swarm(steps: int, peers: int, out: Path) -> tuple[int, list[dict]]:
    cmd = [sys.executable, str(ROOT / "swarm_cli.py"), "local", "--peers", str(peers), "--steps", str(steps),
           "--out", str(out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
    root, peak = psutil.Process(proc.pid), [0]

    def sample():
        while proc.poll() is None:
            try:
                peak[0] = max(peak[0], tree_rss(root))
            except psutil.NoSuchProcess:
                break
            time.sleep(0.5)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    proc.wait()
    sampler.join(timeout=5)
    return peak[0], [row for path in sorted(out.glob("peer*.jsonl")) for row in read_metrics(path)]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=40)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--peers", type=int, default=4)
    args = parser.parse_args(argv)

    times = latency(args.repeats)
    size = len(bundle(0))
    with tempfile.TemporaryDirectory() as tmp:
        peak, rows = local_swarm(args.steps, args.peers, Path(tmp))
    rows = [r for r in rows if r.step > 0]  # the first step waits for the other peers to start
    step = [r.step_seconds for r in rows]
    swarm = [r.swarm.seconds for r in rows]
    wait = [r.swarm.wait_seconds for r in rows]
    work_share = [(s - w) / t for s, w, t in zip(swarm, wait, step, strict=True)]
    total_share = [s / t for s, t in zip(swarm, step, strict=True)]
    print(f"{'figure':<52} {'value':>12}")
    print(f"{'announce -> pulled by another peer, median':<52} {statistics.median(times) * 1000:>9.1f} ms")
    print(f"{'announce -> pulled by another peer, p95':<52} {np.percentile(times, 95) * 1000:>9.1f} ms")
    print(f"{'  (bundle of 8 groups x 8 x 64 tokens, bytes)':<52} {size:>12}")
    print(f"{'local swarm: peers x steps measured':<52} {f'{args.peers} x {len(rows) // max(args.peers, 1)}':>12}")
    print(f"{'median step time':<52} {statistics.median(step):>10.2f} s")
    print(f"{'swarm overhead share of step (work), median':<52} {statistics.median(work_share) * 100:>10.1f} %")
    print(f"{'swarm share incl. waiting for fresh groups, median':<52} {statistics.median(total_share) * 100:>10.1f} %")
    print(f"{'peak memory, bootstrap + peers + launcher':<52} {peak / 2**30:>9.2f} GiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
