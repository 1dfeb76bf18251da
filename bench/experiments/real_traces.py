"""What SAGC and the F- filter did in a real swarm, from its peers' metrics: a `swarm local` folder's
peer*.jsonl (e.g. SmolLM2-135M and Gemma 3 270M on worked answers, where lengths straggle and received rows
diverge).

Per peer: steps; the group sizes SAGC chose (steps at each) and the straggler rate of its own groups; median
generation and step seconds; received groups (pulled, trained on, uninformative, refused by reason); and on the
received rows it trained on: how many the transfer policy's filter zeroed (F-TIS: at or below the group's mean
and diverging by g nats or more), the mean divergence D over the step's rows and its largest, and the mean
importance weight of received tokens. Own rows are counted as the step's completions (G x prompts); a step's
rows beyond them are received ones.

    python -m bench.experiments.real_traces docs/results/real-models/work-swarm
"""
from __future__ import annotations

import argparse
import collections
import json
import statistics
from pathlib import Path


def peer_summary(rows: list[dict]) -> dict:
    """The figures of one peer's run (its metrics rows, one a step)."""
    sizes = collections.Counter(r["group_size"] for r in rows)
    own = [r["group_size"] * r["prompts"] for r in rows]
    received_rows = [max(r["loss"]["sequences"] - o, 0) for r, o in zip(rows, own, strict=True)]
    with_received = [(r, n) for r, n in zip(rows, received_rows, strict=True) if n]
    refused = collections.Counter()
    for r in rows:
        refused.update(r["swarm"]["rejected"])
    return {
        "steps": len(rows), "sizes": dict(sorted(sizes.items())),
        "straggler": statistics.mean(r["group"]["straggler_rate"] for r in rows),
        "gen_s": statistics.median(r["gen_seconds"] for r in rows),
        "step_s": statistics.median(r["step_seconds"] for r in rows),
        "seen": sum(r["swarm"]["peers"] > 0 for r in rows),
        "pulled": sum(r["swarm"]["groups_received"] for r in rows),
        "used": sum(r["swarm"]["groups_used"] for r in rows),
        "uninformative": sum(r["swarm"]["uninformative"] for r in rows),
        "refused": dict(refused),
        "received_rows": sum(received_rows),
        "filtered": sum(r["loss"]["filtered"] for r, _ in with_received),
        "d_mean": statistics.mean(r["loss"]["div_sum_mean"] for r, _ in with_received) if with_received else 0.0,
        "d_max": max((r["loss"]["div_sum_max"] for r, _ in with_received), default=0.0),
        "weight": statistics.mean(r["loss"]["received_weight"] for r, _ in with_received) if with_received else 0.0,
    }


def table(peers: dict[str, dict]) -> list[str]:
    lines = ["| peer | steps | steps at G = 4 / 8 / 12 / 16 | straggler rate | generation s (median) | step s "
             "(median) | steps seeing a partner | groups pulled / trained on / uninformative | refused | received "
             "rows trained on | filtered (share) | D: mean / largest | received token weight |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, p in peers.items():
        share = p["filtered"] / p["received_rows"] if p["received_rows"] else 0.0
        lines.append(f"| {name} | {p['steps']} | {' / '.join(str(p['sizes'].get(g, 0)) for g in (4, 8, 12, 16))} "
                     f"| {p['straggler']:.2f} | {p['gen_s']:.0f} | {p['step_s']:.0f} | {p['seen']} | "
                     f"{p['pulled']} / {p['used']} / {p['uninformative']} | {p['refused'] or '-'} | "
                     f"{p['received_rows']} | {p['filtered']} ({share:.2f}) | {p['d_mean']:.1f} / "
                     f"{p['d_max']:.1f} | {p['weight']:.2f} |")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", help="a `swarm local` --out folder (its peer*.jsonl)")
    args = parser.parse_args(argv)
    peers = {}
    for path in sorted(Path(args.folder).glob("peer*.jsonl")):
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        if rows:
            peers[path.stem] = peer_summary(rows)
    print("\n".join(table(peers)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
