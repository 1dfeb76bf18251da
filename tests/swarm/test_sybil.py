"""Sybil (issue 11): one process with 50 identities (each its own RSA key, peer id and p2p daemon) announcing and
serving valid groups that teach nothing, through a real DHT on loopback, next to two honest peers that learn from
each other. The bound the selection policy gives (node/swarm/senders.py), checked at every step of both honest
peers: newcomers, however many, hold at most `swarm.explore_pulls` pulls at a time, so the Sybil's completions
used in a step are at most explore_pulls x the per-sender cap; the per-step intake stays within its caps and
the swarm phase within the gather deadline; and the honest peer is not crowded out."""
import pytest

from node.config import SwarmConfig, build_config
from node.peer import Peer
from node.swarm import attacks
from node.swarm.dht import SwarmDHT

STEPS = 30
IDENTITIES = 50
SLACK = 1.5  # wall seconds of a step's swarm phase beyond the gather deadline and the CPU budget of received
#              records (publishing; a loaded machine); a wait for the Sybils' pulls (30 s each) would be far more


def config(model: str, seed: int):
    return build_config({"model": {"name": model}, "task": {"name": "arith-add"},
                         "train": {"group_policy": "fixed", "group_size": 8, "prompts_per_step": 8, "seed": seed},
                         "swarm": {"received_groups": 16, "gather_deadline": 0.5, "max_records_per_step": 64,
                                   "max_receive_cpu": 0.5}})


@pytest.mark.slow
def test_fifty_identities_cannot_exceed_the_newcomer_slots_the_caps_or_the_deadline():
    boot = SwarmDHT(SwarmConfig(), bundles=False)
    initial = tuple(boot.visible_maddrs())
    victim = attacks.victim_for("tiny-add", "arith-add")
    sybil = attacks.SybilSwarm(SwarmConfig(initial_peers=initial), victim.card, IDENTITIES)
    dhts = [SwarmDHT(SwarmConfig(initial_peers=initial)) for _ in range(2)]
    peers = [Peer(config("tiny-add", 0), transport=dhts[0]), Peer(config("tiny-add-lora", 1), transport=dhts[1])]
    gathered = [[], []]
    for peer, results in zip(peers, gathered, strict=True):
        def recording(budget, cap, gather=peer.exchange.gather, results=results):
            results.append(gather(budget, cap))
            return results[-1]
        peer.exchange.gather = recording
    honest = [dht.own_subkey for dht in dhts]
    try:
        for step in range(STEPS):
            now = sybil.nodes[0].now()
            stored = sybil.publish(lambda i, step=step, now=now: [attacks.uninformative(
                victim, index, created=now) for index in attacks.random_indices(1000 * step + i, 8)])
            assert stored == IDENTITIES
            for i, peer in enumerate(peers):
                result = peer.step(step)
                swarm_cfg = peer.cfg.swarm
                cap = 8 * 8 * swarm_cfg.max_sender_share  # our own completions this step x the share
                taken = gathered[i][-1].taken
                from_sybil = sum(n for sender, n in taken.items() if sender in sybil.subkeys)
                assert from_sybil <= swarm_cfg.explore_pulls * cap, (step, from_sybil)
                assert result.swarm.groups_received + sum(result.swarm.rejected.values()) \
                    <= swarm_cfg.max_records_per_step
                assert result.swarm.seconds <= swarm_cfg.gather_deadline + swarm_cfg.max_receive_cpu + SLACK, \
                    (step, result.swarm)
                assert not result.swarm.rejected, result.swarm.rejected  # valid records: refused by nobody
        for i in range(2):  # the other honest peer is established and pulled in most of the last steps, and
            other = honest[1 - i]  # its groups are used first: Sybils take only what is left
            pulled = [r.taken[other] for r in gathered[i][-15:] if r.taken.get(other, 0) > 0]
            assert len(pulled) >= 10 and sum(pulled) >= 10 * 8 * 8, (i, pulled)
    finally:
        for peer in peers:
            peer.close()
        sybil.shutdown()
        for dht in [*dhts, boot]:
            dht.shutdown()
