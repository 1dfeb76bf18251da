"""The swarm's own CPU per step, counted where it is spent, beside the same peers alone.

Runs `swarm local` twice in one go, the same zoo peers and steps: sharing (a bootstrap and the peers as processes
on loopback, hivemind's DHT and p2pd) and alone (`--transfer alone`: no sharing). Each peer's metrics give, per
step, its CPU in all (every thread of its process, and its p2pd) and of it the swarm's own: the sharing on the
main thread (discovery, publish, gather and its trust boundary, receipts), the DHT's event-loop thread and the
p2pd daemon (node/system/cpu.py). Prints, per peer, the means a step after the first, the swarm's own share of a
swarm step, and a swarm step's CPU against an alone step's (the rest of the difference is training on the groups
received).

    .venv/bin/python -m bench.network.overhead [--steps 40] [--peers 4]
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from node.app.local_swarm import read_metrics, swarm_cpu

ROOT = Path(__file__).resolve().parents[2]

def run(steps: int, peers: int, out: Path, *extra: str) -> dict[str, dict]:
    """Each peer's swarm_cpu figures from one `swarm local` run."""
    cmd = [sys.executable, str(ROOT / "swarm_cli.py"), "local", "--peers", str(peers), "--steps", str(steps),
           "--eval-every", "0", "--out", str(out), *extra]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"swarm local failed ({done.returncode}): {done.stderr[-2000:]}")
    return {path.stem: swarm_cpu(read_metrics(path)) for path in sorted(out.glob("*.jsonl"))}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--peers", type=int, default=4)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        print(f"swarm local, {args.peers} zoo peers x {args.steps} steps: sharing ...", file=sys.stderr, flush=True)
        swarm = run(args.steps, args.peers, Path(tmp) / "swarm")
        print("... and alone", file=sys.stderr, flush=True)
        alone = run(args.steps, args.peers, Path(tmp) / "alone", "--transfer", "alone")
    print(f"{'peer':<24} {'step ms':>8} {'sharing':>8} {'DHT thr':>8} {'p2pd':>8} {'swarm %':>8} {'alone ms':>9} "
          f"{'x alone':>8}")
    shares, ratios = [], []
    for name, s in swarm.items():
        a = alone.get(name, {})
        ratio = s["cpu_step"] / a["cpu_step"] if a.get("cpu_step") else float("nan")
        shares.append(s["swarm_cpu_share"])
        ratios.append(ratio)
        print(f"{name:<24} {s['cpu_step'] * 1e3:>8.0f} {s['cpu_sharing'] * 1e3:>8.1f} {s['cpu_network'] * 1e3:>8.1f} "
              f"{s['cpu_daemon'] * 1e3:>8.1f} {s['swarm_cpu_share'] * 100:>7.1f}% "
              f"{a.get('cpu_step', float('nan')) * 1e3:>9.0f} {ratio:>8.2f}")
    print(f"median over peers: the swarm's own CPU {statistics.median(shares) * 100:.1f}% of a swarm step "
          f"(main thread + DHT thread + p2pd); a swarm step {statistics.median(ratios):.2f}x an alone step's CPU")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
