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
