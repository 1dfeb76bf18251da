"""Honest groups refused: the false-reject rate of a swarm of honest peers, per receiving peer and reason.

Every refusal in a swarm where no peer attacks is a false reject (honest work thrown away). This reads the
metrics of a finished run (`swarm local --out DIR`: one DIR/<peer>.jsonl a peer) and prints, for each peer, the
groups it looked at (those that passed decoding, and those refused while decoding), the ones it refused by
reason, and their share. Given two folders (before and after a change), it prints both and the change.
Where the run's metrics name the sender of each group (`received_from`, `refused_from`: 2026-12-06 on), it
also prints the share per pair of peers, receiver <- sender, each peer named by its model (the peer ids come
from the peers' logs: "joined swarm ... as <peer id>").

    python -m bench.attacks.false_rejects OUT [OUT_AFTER]
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from node.metrics import read_metrics

ROOT = Path(__file__).resolve().parents[2]

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


def peer_models(folder: Path) -> dict[str, str]:
    """Peer id -> the peer's name in the run (peerN-<model>), from each peer's log."""
    names = {}
    for log in sorted(folder.glob("peer*.log")):
        joined = re.search(r"joined swarm '.*?' as (\S+)", log.read_text(errors="replace"))
        if joined:
            names[joined.group(1)] = log.stem
    return names


def pair_rates(folder: Path) -> dict[tuple[str, str], dict]:
    """(receiver, sender) -> groups looked at and refused by reason; senders not in the run as 'unknown'."""
    names = peer_models(folder)
    out: dict[tuple[str, str], dict] = {}
    for path in sorted(folder.glob("*.jsonl")):
        for r in read_metrics(str(path)):
            for sender, n in r.swarm.received_from.items():
                cell = out.setdefault((path.stem, names.get(sender, "unknown")), {"looked_at": 0, "refused": {}})
                cell["looked_at"] += n
            for sender, reasons in r.swarm.refused_from.items():
                cell = out.setdefault((path.stem, names.get(sender, "unknown")), {"looked_at": 0, "refused": {}})
                for reason, n in reasons.items():
                    cell["refused"][reason] = cell["refused"].get(reason, 0) + n
                    cell["looked_at"] += n if reason in DECODE_REASONS else 0
    return out


def pair_table(pairs: dict[tuple[str, str], dict]) -> str:
    lines = ["| receiver | sender | groups looked at | refused (by reason) | share refused |", "|---|---|---|---|---|"]
    for (receiver, sender), cell in sorted(pairs.items()):
        refused = sum(cell["refused"].values())
        reasons = ", ".join(f"{k} {v}" for k, v in sorted(cell["refused"].items())) or "none"
        share = refused / cell["looked_at"] if cell["looked_at"] else 0.0
        lines.append(f"| {receiver} | {sender} | {cell['looked_at']} | {reasons} | {100 * share:.1f}% |")
    return "\n".join(lines)


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
        pairs = pair_rates(folder)
        if pairs:
            print(pair_table(pairs))
            print()
    if len(runs) == 2:
        before, after = runs
        for peer in sorted(set(before) & set(after)):
            print(f"{peer}: {100 * before[peer]['share']:.1f}% -> {100 * after[peer]['share']:.1f}% refused")
    return 0


if __name__ == "__main__":
    sys.exit(main())
