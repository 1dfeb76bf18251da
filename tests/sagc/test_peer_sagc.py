"""SAGC inside the peer, on the zoo's tiny-count model whose completions straggle often at G = 16."""
from node.config import build_config
from node.peer import Peer


def steps(policy, n, batch_mode="fixed_prompts"):
    cfg = build_config({"model": {"name": "tiny-count"}, "task": {"name": "count"},
                        "generation": {"max_new_tokens": 32},
                        "train": {"group_policy": policy, "group_size": 16, "prompts_per_step": 8,
                                  "batch_mode": batch_mode, "completions_per_step": 64}})
    peer = Peer(cfg)
    return [peer.step(s) for s in range(n)]


def test_sagc_is_the_default_and_shrinks_straggling_groups():
    assert build_config().train.group_policy == "sagc"
    results = steps("sagc", 12)
    sizes = [r.group_size for r in results]
    assert sizes[0] == 16 and min(sizes) < 16, sizes
    m = results[-1].group
    assert m.lam > 0
    assert set(m.p_mean) == {"4", "8", "12", "16"}
    # the first steps at G = 16 straggle above the 0.3 budget: that is what drives the size down
    assert results[0].group.straggler_rate > 0.3


def test_fixed_policy_and_fixed_completions_mode():
    fixed = steps("fixed", 3)
    assert [r.group_size for r in fixed] == [16, 16, 16] and fixed[0].group.lam == 0 and fixed[0].group.p_mean == {}
    sagc = steps("sagc", 12, batch_mode="fixed_completions")
    assert all(r.prompts * r.group_size in range(56, 73) for r in sagc)  # about 64 completions per step


def test_a_size_is_priced_by_its_own_groups_not_by_learning_received_ones():
    """SAGC values a size per second of what the size costs: generation and the own groups' share of learning.
    A peer that learns a partner's groups too pays for them at every size; priced into the size it chose, that
    made the size look dear."""
    from node.sagc.policy import size_seconds
    from node.swarm.memory import MemorySwarm
    from protocol import ANNOUNCE_SHARDS

    hub = MemorySwarm()

    def swarm_peer(name, model):
        cfg = build_config({"model": {"name": model}, "task": {"name": "arith"},
                            "train": {"group_policy": "sagc", "prompts_per_step": 4, "seed": len(name)},
                            "swarm": {"gather_deadline": 0.2, "shards_per_step": ANNOUNCE_SHARDS,
                                      "informative_only": False}})
        return Peer(cfg, transport=hub.transport(name))

    a, b = swarm_peer("a", "tiny-add"), swarm_peer("bb", "tiny-sub")
    a.step(0)
    got = b.step(0)
    assert got.swarm.groups_used > 0 and got.loss.tokens > got.tokens  # it learned a's groups as well as its own
    priced = b.policy.controller.costs[got.group_size]
    assert priced == size_seconds(got.gen_seconds, got.learn_seconds, got.tokens, got.loss.tokens)
    assert priced < got.gen_seconds + got.learn_seconds
