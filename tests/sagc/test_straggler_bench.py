"""The long-completion benchmarks' arithmetic: within-group length statistics, SAGC run offline over recorded
groups, and the straggler experiment's time-to-target ratios, intervals and power."""
import json
import math
import statistics

import pytest

from bench.experiments import group_lengths, straggler


def test_group_stats_and_by_size_are_exact():
    assert group_lengths.group_stats([10, 10, 10, 30]) == {"cv": pytest.approx(statistics.pstdev([10, 10, 10, 30])
                                                                                / 15), "max_median": 3.0}
    groups = [[10, 10, 10, 30, 10, 10, 10, 10], [10, 12, 14, 16, 10, 10, 10, 10]]
    four = group_lengths.by_size(groups, 4, (2.0, 3.0))
    assert four["groups"] == 2
    assert four["straggler"] == {2.0: 0.5, 3.0: 0.0}  # 30 > 2 x 10 straggles; 16 > 2 x 13 does not
    assert four["cost"] == pytest.approx((4 * 30 + 4 * 16) / 2)
    assert four["utilisation"] == pytest.approx(statistics.median([15 / 30, 13 / 16]))
    assert group_lengths.by_size([[10] * 4, [10] * 8], 8, (2.0,))["groups"] == 1  # groups shorter than G: left out


def test_offline_sagc_shrinks_groups_only_where_they_straggle():
    """Groups whose 16 lengths hold one 10x outlier among the first 8: SAGC at tau 2, delta 0.3 leaves G = 16
    for smaller sizes and cuts the decode cost; on groups of equal lengths it keeps G = 16 and costs the same."""
    tailed = [[10] * 5 + [100] + [10] * 10, [10] * 16, [10] * 3 + [100] + [10] * 12]
    run = group_lengths.offline_sagc(tailed, tau=2.0, delta=0.3, steps=200, per_step=8)
    assert run["share"][16] < 0.5 and run["cost_vs_16"] < 0.9
    even = group_lengths.offline_sagc([[10] * 16], tau=2.0, delta=0.3, steps=100, per_step=8)
    assert even["share"][16] > 0.9 and even["straggler"] == 0.0 and even["cost_vs_16"] > 0.9


def _result(policy, seed, times_accs, straggle=0.5, group=16):
    evals = [{"step": 5 * i, "seconds": t, "acc": a} for i, (t, a) in enumerate(times_accs)]
    peer = {"evals": evals, "straggler": [straggle], "group_size": [group], "gen_seconds": [1.0],
            "step_seconds": [2.0], "slots": [100], "tokens": [50], "reward": [0.5], "received": [8]}
    return {"policy": policy, "seed": seed, "steps": 60, "tau": 2.0, "delta": 0.3, "commit": "abc1234",
            "peers": {"peer0": peer, "peer1": peer}}


def test_time_to_target_ratio_interval_and_power():
    """G = 16 reaches its final accuracy (mean of its last three evaluations, 0.6) at 40 s; SAGC at 20 s in
    seed 1 and 24 s in seed 2: ratios 0.5 and 0.6; G = 4 never does (reached 0 of 2)."""
    g16 = [(0, 0.2), (10, 0.3), (20, 0.4), (30, 0.5), (40, 0.6), (50, 0.6), (60, 0.6)]
    results = [_result("16", s, g16) for s in (1, 2)]
    results += [_result("sagc", 1, [(0, 0.2), (10, 0.4), (20, 0.6), (30, 0.7)], group=8),
                _result("sagc", 2, [(0, 0.2), (12, 0.4), (24, 0.6), (36, 0.7)], group=8),
                _result("4", 1, [(0, 0.2), (10, 0.3), (20, 0.4)], group=4),
                _result("4", 2, [(0, 0.2), (10, 0.3), (20, 0.4)], group=4)]
    lines = straggler.report(results)
    row = next(line for line in lines if line.startswith("| SAGC"))
    assert "| 0.55 |" in row and "| 2/2 |" in row
    gmean, low, high = straggler.log_interval([0.5, 0.6])
    assert gmean == pytest.approx(math.sqrt(0.3))
    assert low < 0.5 and high > 0.6
    assert "| 0/2 |" in next(line for line in lines if line.startswith("| G=4"))
    assert math.isnan(straggler.log_interval([math.inf, 0.5])[1])  # one finite ratio: no interval
    tight, loose = straggler.detectable([0.5, 0.52, 0.51, 0.49]), straggler.detectable([0.3, 0.9, 0.5, 0.7])
    assert 0.9 < tight < 1.0 and loose < tight  # noisier seeds: only a larger saving is seen


def test_the_run_command_names_the_policy_and_the_testbed():
    cmd = straggler.command("8", 3, 60, 5, 2.0, 0.3, 8, 128, straggler.OUT / "x")
    assert cmd[cmd.index("--group-size") + 1] == "8" and cmd[cmd.index("--group-policy") + 1] == "fixed"
    assert cmd[cmd.index("--task") + 1] == "digits-check" and "train.seed=3000" in cmd
    sagc = straggler.command("sagc", 3, 60, 5, 2.5, 0.4, 8, 128, straggler.OUT / "x")
    assert "--group-size" not in sagc and "sagc.tau=2.5" in sagc and "sagc.delta=0.4" in sagc
    assert not any("price_time" in x for x in sagc)  # the node's default objective
    per_step = straggler.command("sagc-per-step", 3, 60, 5, 2.0, 0.3, 8, 128, straggler.OUT / "x")
    assert per_step[per_step.index("--group-policy") + 1] == "sagc" and "sagc.price_time=false" in per_step


def test_lengths_are_sampled_by_the_nodes_backend():
    """Four digits prompts, groups of four, from the zoo's digit-add-bpe: every group has four lengths, every
    completion a finish reason and a reward, and digits' groups do not straggle (one length a prompt, nearly)."""
    data = group_lengths.sample("digit-add-bpe", "digits", prompts=4, group=4, per_step=2, cap=0, temperature=1.0,
                                backend="transformers", seed=0)
    assert [len(g) for g in data["groups"]] == [4] * 4 and data["cap"] == 64
    assert len(data["seconds"]) == 2 and all(s > 0 for s in data["slots"])
    assert all(len(f) == 4 for f in data["finished"]) and all(len(r) == 4 for r in data["rewards"])
    lines = group_lengths.report(data, (2.0,), (0.3,), steps=10, per_step=2)
    assert any(line.startswith("| 4 | 0.000 |") for line in lines)


def test_the_page_section_has_the_lengths_the_comparison_and_a_plot(tmp_path):
    lengths = {"model": "m", "groups": [[10] * 15 + [40]] * 4, "finished": [[True] * 16] * 4,
               "rewards": [[0.0] * 16] * 4, "cap": 224}
    (tmp_path / "lengths_m.json").write_text(json.dumps(lengths))
    row = straggler.lengths_table([tmp_path / "lengths_m.json"])[2]
    assert row.startswith("| m | 4 x 16 | 11.9 | 0.000 |")
    assert "| 4.00; 4.00 |" in row and "0.00 / 0.00 / 0.00 / 1.00" in row  # the outlier is the 16th sample
    g16 = [(0, 0.2), (10, 0.4), (20, 0.6), (30, 0.6)]
    results = [_result("16", 1, g16), _result("sagc", 1, [(0, 0.2), (10, 0.6), (20, 0.6), (30, 0.7)], group=8),
               _result("sagc-per-step", 1, [(0, 0.2), (10, 0.4), (20, 0.6), (30, 0.7)], group=12)]
    text = "\n".join(straggler.section(results, tmp_path))
    assert "## 4. SAGC where completions straggle" in text and "| SAGC |" in text
    assert "| SAGC, log2 G a step | 1.00 |" in text  # the same curve as G = 16 up to its target
    assert (tmp_path / "straggler.png").stat().st_size > 10_000


def test_sagc_is_compared_with_the_fixed_sizes_rerun_in_its_session(tmp_path):
    """A rerun folder replaces the earlier session's G = 4 in the comparison: SAGC reaches G = 16's target (0.6)
    at 20 s, the earlier G = 4 at 10 s (ratio 2.0), the rerun G = 4 at 20 s (ratio 1.0)."""
    g16 = [(0, 0.2), (20, 0.4), (40, 0.6), (50, 0.6), (60, 0.6)]
    results = [_result("16", 1, g16), _result("16", 2, g16),
               *(_result("sagc", s, [(0, 0.2), (10, 0.4), (20, 0.6)], group=4) for s in (1, 2)),
               *(_result("4", s, [(0, 0.2), (5, 0.4), (10, 0.6)], group=4) for s in (1, 2))]
    assert straggler.same_session(results, tmp_path / "none") == []
    (tmp_path / "rerun").mkdir()
    for s in (1, 2):
        (tmp_path / "rerun" / f"4_s{s}_n60.json").write_text(json.dumps(
            _result("4", s, [(0, 0.2), (10, 0.4), (20, 0.6)], group=4)))
    before = next(line for line in straggler.report(results) if line.startswith("SAGC against"))
    after = next(line for line in straggler.same_session(results, tmp_path / "rerun")
                 if line.startswith("SAGC against"))
    assert "SAGC / G=4 2.00" in before and "SAGC / G=4 1.00" in after
