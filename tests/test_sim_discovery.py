"""The discovery simulation (bench/sim_discovery.py) at a small N: the defences of node/swarm/membership.py hold
the attacker near its identity share and newcomers find senders at once, and without them the attacker takes
the views. (The 100-10,000 peer table in docs/PROTOCOL.md comes from the same code at full size.)"""
import sim_discovery as sim


def measure(*flags):
    args = sim.parse_args(["--peers", "300", "--rounds", "24", "--warmup", "8", "--newcomers", "8", *flags])
    return sim.run(300, args, entry_bytes=1733, validate_s=1e-4, seed=args.seed)


def test_the_defences_hold_sybils_to_their_share_and_newcomers_find_senders_at_once():
    defended = measure()
    assert defended["view_sybil"] < 0.25 and defended["sampler_sybil"] < 0.1 and defended["pull_sybil"] < 0.15
    assert defended["first_missing"] == 0 and max(defended["first"]) <= 2  # a group within 2 steps, all
    assert defended["flooded"] > 0  # the push limit acted
    assert defended["silent_asks"] < 0.1  # silent peers are not asked again and again
    control = measure("--no-defences")
    assert control["view_sybil"] > 0.8 and control["pull_sybil"] > 2 * defended["pull_sybil"]
    # newcomers: their directory reads find them honest senders even so; without those, the Sybils eclipse some
    assert measure("--no-defences", "--no-directory")["first_missing"] > defended["first_missing"]


def test_newcomers_seeded_by_dht_neighbours_spare_the_bootstrap_and_still_find_senders_at_once():
    args = sim.parse_args(["--peers", "300", "--rounds", "24", "--warmup", "8", "--newcomers", "8"])
    runs = {seeding: sim.run(300, args, entry_bytes=1733, validate_s=1e-4, seed=args.seed, seeding=seeding)
            for seeding in ("neighbours", "bootstrap")}
    assert runs["neighbours"]["boot_bytes"] < 0.95 * runs["bootstrap"]["boot_bytes"], runs
    for r in runs.values():
        assert r["first_missing"] == 0 and max(r["first"]) <= 2, r["first"]
