"""Honest groups refused: the false-reject rate of a swarm of honest peers, per receiving peer and reason.

Every refusal in a swarm where no peer attacks is a false reject (honest work thrown away). This reads the
metrics of a finished run (`swarm local --out DIR`: one DIR/<peer>.jsonl a peer) and prints, for each peer, the
groups it looked at (those that passed decoding, and those refused while decoding), the ones it refused by
reason, and their share. Given two folders (before and after a change), it prints both and the change.

    python bench/false_rejects.py OUT [OUT_AFTER]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from node.metrics import read_metrics  # noqa: E402

DECODE_REASONS = {"tokenizer", "vocab", "logprob", "version", "malformed", "oversize", "type"}  # refused before a
#   group counts as received (exchange.py: decode_received); the others after (rebuild_received, the memory)


def peer_rates(folder: Path) -> dict[str, dict]:
    """Per peer: groups looked at, refused by reason, trained on."""
    out = {}
    for path in sorted(folder.glob("*.jsonl")):
        rows = read_metrics(str(path))
        refused: dict[str, int] = {}
        for r in rows:
            for reason, n in r.swarm.rejected.items():
                refused[reason] = refused.get(reason, 0) + n
        received = sum(r.swarm.groups_received for r in rows)
        looked = received + sum(n for reason, n in refused.items() if reason in DECODE_REASONS)
        out[path.stem] = {"steps": len(rows), "looked_at": looked, "refused": refused,
                          "used": sum(r.swarm.groups_used for r in rows),
                          "share": sum(refused.values()) / looked if looked else 0.0}
    return out


def table(rates: dict[str, dict], title: str) -> str:
    lines = [f"{title}", "| peer | steps | groups looked at | refused (by reason) | share refused | trained on |",
             "|---|---|---|---|---|---|"]
    for peer, r in rates.items():
        reasons = ", ".join(f"{k} {v}" for k, v in sorted(r["refused"].items())) or "none"
        lines.append(f"| {peer} | {r['steps']} | {r['looked_at']} | {reasons} | {100 * r['share']:.1f}% | "
                     f"{r['used']} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", type=Path, help="a run's output folder; a second: the run after")
    args = parser.parse_args(argv)
    runs = [peer_rates(folder) for folder in args.folders]
    for folder, rates in zip(args.folders, runs, strict=True):
        print(table(rates, f"{folder}:"))
        print()
    if len(runs) == 2:
        before, after = runs
        for peer in sorted(set(before) & set(after)):
            print(f"{peer}: {100 * before[peer]['share']:.1f}% -> {100 * after[peer]['share']:.1f}% refused")
    return 0


if __name__ == "__main__":
    sys.exit(main())
