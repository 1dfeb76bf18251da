"""Poisoning (issue point 5) through a real DHT on loopback: two honest peers (full and LoRA) train on
arith-add while a hostile peer publishes, every step, groups of right answers behind '=' padding that the
verifier ignores, claiming behaviour log-probs of -30 per token (which used to pin every importance weight at
C and drove the receivers' reward to 0 for good). Its groups must all be refused, and the honest peers must
learn as they do in a clean run with the same seeds: their sampled reward level with it, their held-out greedy
accuracy well above the untrained model's."""
import statistics

import pytest

from bench.attacks import hostile
from node.config import SwarmConfig, build_config
from node.peer import Peer
from node.swarm.dht import SwarmDHT

STEPS = 60
BAND = 0.08  # |attacked - clean| of the last 20 steps' mean reward; clean vs clean, same seeds: <= 0.04 here
LEARNT = 0.3  # held-out greedy accuracy (256 prompts) gained over the run: 0.203 -> 0.76-0.82 (8 peers, 4 runs here)


def honest_config(model: str, seed: int):
    return build_config({"model": {"name": model}, "task": {"name": "arith-add"},
                         "train": {"group_policy": "fixed", "group_size": 8, "prompts_per_step": 16, "seed": seed},
                         "eval": {"prompts": 256, "samples": 0, "splits": ["train"]},
                         "swarm": {"received_groups": 16, "gather_deadline": 0.3}})


def poison_records(v, step: int, now: float) -> list[bytes]:
    """The published attack (30 '=' of padding) and the same inside our length limit, both claiming -30."""
    indices = hostile.random_indices(10_000 + step, 8)
    return ([hostile.padding_poison(v, i, now, claims="low", pad=30) for i in indices[:4]]
            + [hostile.padding_poison(v, i, now, claims="low") for i in indices[4:]])


def greedy_accuracy(peer: Peer) -> float:
    """The peer's held-out greedy accuracy (its eval configuration: fixed prompts that training never draws)."""
    return peer.evaluate()[0]["train/greedy"]


def run_swarm(attack: bool, steps: int = STEPS) -> dict:
    """Rewards, held-out greedy accuracy before and after, and rejections of the two honest peers, with or
    without the attacker."""
    boot = SwarmDHT(SwarmConfig())
    initial = tuple(boot.visible_maddrs())
    dhts = [SwarmDHT(SwarmConfig(initial_peers=initial)) for _ in range(2)]
    victim = hostile.victim_for("tiny-add", "arith-add")
    attacker = hostile.HostileDHT(SwarmConfig(initial_peers=initial), card=victim.card) if attack else None
    peers = [Peer(honest_config("tiny-add", 0), transport=dhts[0]),
             Peer(honest_config("tiny-add-lora", 1), transport=dhts[1])]
    out = {"rewards": [[], []], "rejected": {}, "sent": 0, "accuracy": [[greedy_accuracy(p)] for p in peers]}
    try:
        for step in range(steps):
            if attacker is not None:
                records = poison_records(victim.signed_by(attacker.own_subkey), step, attacker.now())
                assert attacker.publish_records("groups", records)
                out["sent"] += len(records)
            for i, peer in enumerate(peers):
                result = peer.step(step)
                out["rewards"][i].append(result.reward)
                for reason, n in result.swarm.rejected.items():
                    out["rejected"][reason] = out["rejected"].get(reason, 0) + n
        for accuracy, peer in zip(out["accuracy"], peers, strict=True):
            accuracy.append(greedy_accuracy(peer))
    finally:
        for peer in peers:
            peer.close()
        for dht in [*dhts, boot] + ([attacker] if attacker else []):
            dht.shutdown()
    return out


@pytest.mark.slow
def test_the_published_poisoning_attack_is_refused_and_honest_learning_is_unchanged():
    clean, attacked = run_swarm(attack=False), run_swarm(attack=True)
    assert clean["rejected"] == {}
    # every hostile group looked at is refused by each honest peer, under its reason (too long, or impossible
    # claims); a sender of nothing but refused records is backed off, so not all of them need be looked at
    assert set(attacked["rejected"]) == {"length", "logprob"}
    assert 0 < attacked["rejected"]["length"] + attacked["rejected"]["logprob"] <= 2 * attacked["sent"]
    for c, a in zip(clean["rewards"], attacked["rewards"], strict=True):
        last_clean, last_attacked = statistics.mean(c[-20:]), statistics.mean(a[-20:])
        assert abs(last_attacked - last_clean) <= BAND, (last_clean, last_attacked)
    # and they learn, judged on fixed held-out prompts (not on a few steps' sampled reward, whose prompts are
    # drawn anew each step: in a clean-clone CI run of 2026-12-07 the mean of the first 5 steps happened to be
    # 0.497, against 0.33-0.47 in 10 runs here, and the last 20 steps' 0.519 missed it + 0.03)
    for before, after in attacked["accuracy"]:
        assert after >= before + LEARNT, (before, after)


BEHAVE, AFTER = 8, 10  # identities behave for BEHAVE steps; they must be distrusted within AFTER steps
#                      (bench/attacks/catalogue.py's behave-* rows: 12 behaving steps of 60, k = 1, 4, 8, every poison)


def test_identities_that_behave_then_poison_lose_their_place_and_never_reach_the_gradient_again():
    """Issue 23, 4: four identities serve honestly sampled groups of the zoo model (its true log-probs) until
    they are established, then switch to poison-floor (padding, claims just inside the codec's bound). Each
    honest peer must distrust all four within AFTER steps of the switch (and nobody honest), drop their rows
    from the gradient from then on, and keep learning."""
    boot = SwarmDHT(SwarmConfig())
    initial = tuple(boot.visible_maddrs())
    dhts = [SwarmDHT(SwarmConfig(initial_peers=initial)) for _ in range(2)]
    victim = hostile.victim_for("tiny-add", "arith-add", with_model=True)
    attackers = [hostile.HostileDHT(SwarmConfig(initial_peers=initial), card=victim.card) for _ in range(4)]
    peers = [Peer(honest_config("tiny-add", 0), transport=dhts[0]),
             Peer(honest_config("tiny-add-lora", 1), transport=dhts[1])]
    hostile_ids = {h.peer_id for h in attackers}
    rewards, distrusted_rows, established_at_switch, all_distrusted_at = [[], []], [[], []], [0, 0], [None, None]
    try:
        for step in range(BEHAVE + 8):
            for j, h in enumerate(attackers):
                seed, own = 7919 * j + step, victim.signed_by(h.own_subkey)
                if step < BEHAVE:
                    records = hostile.sampled_groups(own, hostile.random_indices(seed, 4), h.now(), seed=seed)
                else:
                    records = [hostile.padding_poison(own, i, h.now(), claims="floor")
                               for i in hostile.random_indices(10_000 + seed, 8)]
                assert h.publish_records("groups", records)
            for i, peer in enumerate(peers):
                result = peer.step(step)
                rewards[i].append(result.reward)
                distrusted_rows[i].append(result.loss.distrusted)
                if all_distrusted_at[i] is None and hostile_ids <= set(peer.exchange.ledger.distrusted):
                    all_distrusted_at[i] = step
                if step == BEHAVE - 1:
                    established_at_switch[i] = sum(s.established for s in peer.exchange.ledger.known.values()
                                                   if s.announcement.peer_id in hostile_ids)
        for i, peer in enumerate(peers):
            assert established_at_switch[i] >= 2, "the attack needs established identities to mean anything"
            assert set(peer.exchange.ledger.distrusted) == hostile_ids  # all four, nobody honest
            assert all_distrusted_at[i] is not None and all_distrusted_at[i] < BEHAVE + AFTER
            assert sum(distrusted_rows[i][:BEHAVE]) == 0 and sum(distrusted_rows[i][BEHAVE:]) > 0
            # nothing of theirs is pulled once distrusted: the steps after that train on no distrusted row
            assert sum(distrusted_rows[i][all_distrusted_at[i] + 1:]) == 0
            assert statistics.mean(rewards[i][-4:]) >= statistics.mean(rewards[i][:4]) - 0.05
    finally:
        for peer in peers:
            peer.close()
        for dht in [*dhts, boot, *attackers]:
            dht.shutdown()
