"""The discovery simulation (bench/sim/discovery.py) at a small N, every honest peer running the node's own
discovery step (node/swarm/discovery.py): the defences hold the attacker near its identity share and newcomers
find senders at once; without them the attacker's share of views grows several-fold. (The 100-10,000 peer table
in docs/BENCHMARKS.md comes from the same code at full size.)"""
import functools

from bench.sim import discovery as sim


@functools.cache  # (deterministic: the defended run both tests read is simulated once)
def measure(*flags, seeding="neighbours"):
    args = sim.parse_args(["--peers", "300", "--rounds", "24", "--warmup", "8", "--newcomers", "8", *flags])
    return sim.run(300, args, entry_bytes=1733, validate_s=1e-4, seed=args.seed, seeding=seeding)


def test_the_defences_hold_sybils_to_their_share_and_newcomers_find_senders_at_once():
    defended = measure(seeding="neighbours")
    assert defended["view_sybil"] < 0.25 and defended["sampler_sybil"] < 0.1 and defended["pull_sybil"] < 0.15
    assert defended["first_missing"] == 0 and max(defended["first"]) <= 2  # a group within 2 steps, all
    assert defended["full_missing"] == 0  # and 8 distinct senders within the run
    assert defended["flooded"] > 0  # the push limit acted
    assert defended["silent_asks"] < 0.1  # silent peers are not asked again and again
    control = measure("--no-defences")
    assert control["view_sybil"] > max(0.4, 2 * defended["view_sybil"]), (control, defended)
    assert control["pull_sybil"] > defended["pull_sybil"] and control["flooded"] == 0
    # a newcomer's seeds alone (no directory read answered) bring it its first groups at once
    alone = measure("--no-directory")
    assert alone["first_missing"] == 0 and max(alone["first"]) <= 2, alone["first"]


def test_newcomers_seeded_by_dht_neighbours_spare_the_bootstrap_and_still_find_senders_at_once():
    runs = {seeding: measure(seeding=seeding) for seeding in ("neighbours", "bootstrap")}
    assert runs["neighbours"]["boot_bytes"] < 0.95 * runs["bootstrap"]["boot_bytes"], runs
    for r in runs.values():
        assert r["first_missing"] == 0 and max(r["first"]) <= 2, r["first"]
