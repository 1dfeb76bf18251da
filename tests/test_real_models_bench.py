"""bench/experiments/real_models.py on made-up metrics: each run's held-out figures at equal steps, the paired
differences over seeds, and the comparison at equal wall clock."""
import json

import pytest

from bench.experiments import real_models


def rows(steps: int, accuracies: dict[int, float], step_seconds: float, used: int = 0) -> list[dict]:
    """A run's metrics lines: evaluations after the steps named in `accuracies` (steps done -> ID accuracy; OOD is
    half of it), 0.2 before training, each step `step_seconds` long."""
    out, clock = [], 1000.0
    for step in range(steps):
        clock += step_seconds
        acc = accuracies.get(step + 1)
        out.append({"step": step, "time": clock, "step_seconds": step_seconds,
                    "eval_before": {"train/greedy": 0.2, "test/greedy": 0.1} if step == 0 else {},
                    "eval": {"train/greedy": acc, "test/greedy": acc / 2} if acc is not None else {},
                    "swarm": {"groups_received": 2 * used, "groups_used": used, "uninformative": used,
                              "rejected": {"length": 1} if step == 0 and used else {}, "harm": 0.1 * step,
                              "demoted": 0, "distrusted": 0}})
    return out


def write(folder, name, lines):
    folder.mkdir(exist_ok=True)
    (folder / f"{name}.jsonl").write_text("\n".join(json.dumps(r) for r in lines) + "\n")


def test_one_runs_figures_at_equal_steps():
    s = real_models.summary(rows(6, {3: 0.4, 6: 0.8}, 2.0, used=1), most=6)
    assert s["steps"] == 6 and s["id_auc"] == pytest.approx(0.6) and s["id_final"] == 0.8
    assert s["ood_auc"] == pytest.approx(0.3) and s["received"] == 12 and s["used"] == 6 and s["refused"] == 1
    assert s["harm_max"] == pytest.approx(0.5)
    cut = real_models.summary(rows(6, {3: 0.4, 6: 0.8}, 2.0), most=3)  # a longer run cut to its partner's steps
    assert cut["steps"] == 3 and cut["id_auc"] == pytest.approx(0.4) and cut["id_final"] == 0.4
    points = real_models.curve(rows(6, {3: 0.4, 6: 0.8}, 2.0), "train")
    assert points == [(0, 0.2, 0.0), (3, 0.4, 6.0), (6, 0.8, 12.0)]
    assert real_models.at_time(points, 11.9) == 0.4 and real_models.at_time(points, 12.0) == 0.8


def test_paired_differences_over_seeds_and_at_equal_wall_clock(tmp_path, capsys):
    for seed, (swarm_acc, alone_acc) in enumerate([(0.7, 0.6), (0.9, 0.6)]):
        folder = tmp_path / f"seed{seed}"
        # the swarm peer is slower a step (3 s against 2 s): at the alone run's end (12 s) it has done 4 steps
        write(folder, "swarm-m", rows(6, {3: swarm_acc, 6: swarm_acc}, 3.0, used=2))
        write(folder, "alone-m", rows(8, {3: alone_acc, 6: alone_acc, 8: 0.99}, 2.0))
    assert real_models.main([str(tmp_path / "seed0"), str(tmp_path / "seed1"), "--models", "m"]) == 0
    out = capsys.readouterr().out
    table = next(line for line in out.splitlines() if line.startswith("| m |"))
    cells = [c.strip() for c in table.strip("|").split("|")]
    # equal steps: the alone run is cut to the swarm's 6 (its step-8 evaluation left out): +0.1 and +0.3
    assert cells[1].startswith("+0.200 +- ")
    half = float(cells[1].split("+- ")[1].split()[0])
    assert half == pytest.approx(12.706 * 0.1414 / 2 ** 0.5, rel=1e-3)
    # equal wall clock, whole runs: within the alone run's 16 s, the swarm's step-3 evaluation (9 s; its step-6 one
    # came at 18 s) against the alone run's step-8 one (0.99): -0.29 and -0.09
    assert cells[5].startswith("-0.190 +- ")


def test_the_sampling_sd_of_one_seeds_difference(tmp_path, capsys):
    assert real_models.evaluation_sd(0.5, 0.5, 64) == pytest.approx((0.5 / 64) ** 0.5)
    assert real_models.evaluation_sd(1.0, 0.0, 64) == 0.0
    folder = tmp_path / "seed0"
    write(folder, "swarm-m", rows(6, {3: 0.7, 6: 0.75}, 3.0, used=2))
    write(folder, "alone-m", rows(6, {3: 0.6, 6: 0.5}, 2.0))
    assert real_models.main([str(folder), "--models", "m", "--eval-prompts", "100"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith(f"| {folder} | m | ID |"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    sd = ((0.75 * 0.25 + 0.25) / 100) ** 0.5
    assert cells[3] == "+0.250" and float(cells[4]) == pytest.approx(sd, abs=5e-4)
    assert float(cells[5]) == pytest.approx(0.25 / sd, abs=5e-3)


def test_real_traces_count_what_sagc_and_the_filter_did():
    from bench.experiments.real_traces import peer_summary

    def step(g, sequences, filtered, d_mean, d_max, weight, peers=1, rejected=None):
        return {"group_size": g, "prompts": 2, "gen_seconds": g, "step_seconds": 2 * g,
                "group": {"straggler_rate": 0.5 if g > 4 else 0.0},
                "loss": {"sequences": sequences, "filtered": filtered, "div_sum_mean": d_mean, "div_sum_max": d_max,
                         "received_weight": weight},
                "swarm": {"peers": peers, "groups_received": 2, "groups_used": 1, "uninformative": 1,
                          "rejected": rejected or {}}}

    # own rows 16, 8, 8: received 0, 8 and 4 rows
    p = peer_summary([step(8, 16, 0, 0.0, 0.0, 0.0, peers=0, rejected={"stale": 2}), step(4, 16, 6, 40.0, 90.0, 0.2),
                      step(4, 12, 1, 10.0, 60.0, 0.6, rejected={"stale": 1})])
    assert p["sizes"] == {4: 2, 8: 1} and p["straggler"] == pytest.approx(1 / 6) and p["seen"] == 2
    assert (p["gen_s"], p["step_s"], p["pulled"], p["used"], p["uninformative"]) == (4, 8, 6, 3, 3)
    assert p["refused"] == {"stale": 3} and p["received_rows"] == 12 and p["filtered"] == 7
    assert (p["d_mean"], p["d_max"], p["weight"]) == (pytest.approx(25.0), 90.0, pytest.approx(0.4))


def test_other_arms_compare_the_same_way(tmp_path, capsys):
    folder = tmp_path / "seed0"
    write(folder, "sagc-m", rows(12, {4: 0.5, 8: 0.6, 12: 0.7}, 1.0))  # cheaper steps, more of them
    write(folder, "g16-m", rows(8, {4: 0.4, 8: 0.5}, 2.0))
    assert real_models.main([str(folder), "--models", "m", "--arms", "sagc,g16"]) == 0
    out = capsys.readouterr().out
    assert f"| {folder} | m | sagc | 8 |" in out and f"| {folder} | m | g16 | 8 |" in out
    assert "sagc - g16, paired over seeds" in out
    cells = [c.strip() for c in next(x for x in out.splitlines() if x.startswith("| m |")).strip("|").split("|")]
    # equal steps (8): final ID 0.6 vs 0.5; equal wall clock (SAGC's whole run, 12 s, ended first): its step-12
    # evaluation (0.7) against G = 16's last within 12 s, at step 4 (8 s; 0.4)
    assert cells[2].startswith("+0.100 (one seed)") and cells[5].startswith("+0.300 (one seed)")


def test_time_to_the_second_arms_accuracy_and_what_group_control_did(tmp_path, capsys):
    run = rows(6, {3: 0.4, 6: 0.8}, 2.0)
    for r in run:  # evaluations take time of their own: the clock runs 5 s more after each
        r["time"] += 5.0 * (r["step"] // 3)
    assert real_models.own_seconds_curve(run) == [(0, 0.2, 0.0), (3, 0.4, 6.0), (6, 0.8, 12.0)]
    assert real_models.time_to(real_models.own_seconds_curve(run), 0.4) == 6.0
    assert real_models.time_to(real_models.own_seconds_curve(run), 0.2) == 6.0  # not the start's evaluation
    assert real_models.time_to(real_models.own_seconds_curve(run), 0.9) is None
    fast, slow = rows(9, {3: 0.5, 6: 0.7, 9: 0.6}, 1.0), rows(6, {3: 0.3, 6: 0.6}, 4.0)
    for r, g in zip(fast, (16, 12, 8, 4, 4, 4, 4, 4, 4), strict=True):
        r.update(group_size=g, gen_seconds=g / 4, group={"straggler_rate": 0.5 if g > 4 else 0.0})
    for r in slow:
        r.update(group_size=16, gen_seconds=3.0, group={"straggler_rate": 0.75})
    figures = real_models.arm_figures(fast)
    assert figures["sizes"] == [16, 12, 8, 4, 4, 4, 4, 4, 4] and figures["straggler"] == pytest.approx(1.5 / 9)
    assert figures["gen_s"] == 1.0 and figures["step_s"] == 1.0
    write(tmp_path / "seed0", "sagc-m", fast)
    write(tmp_path / "seed0", "g16-m", slow)
    assert real_models.main([str(tmp_path / "seed0"), "--models", "m", "--arms", "sagc,g16"]) == 0
    out = capsys.readouterr().out.splitlines()
    # g16's final ID at equal steps (6) is 0.6, at 24 s of its own steps; sagc first reaches it after step 6 (6 s)
    assert f"| {tmp_path / 'seed0'} | m | sagc | 9 | 16 12 8 4 4 4 4 4 4 | 0.17 | 1 | 1 | 6 | 0.25x |" in out
    assert f"| {tmp_path / 'seed0'} | m | g16 | 6 | 16 16 16 16 16 16 | 0.75 | 3 | 4 | 24 | 1.00x |" in out
