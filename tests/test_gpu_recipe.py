"""The GPU recipe's CPU path: our swarm (two zoo peers as processes, SAGC on) and TRL's GRPOTrainer on the same
long-completion task, each for a few steps, and one table with both."""
import json

from bench.perf import gpu_recipe


def test_the_straggler_rate_and_ends_are_exact():
    assert gpu_recipe.straggler_rate([[10, 10, 10, 25], [10, 10, 10, 20]]) == 0.5  # 25 > 2 x 10; 20 is not
    assert gpu_recipe.ends([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0]) == (1.5, 9.5)


def test_the_cpu_path_runs_ours_and_trl_side_by_side(tmp_path, capsys):
    assert gpu_recipe.main(["--cpu-check", "--minutes", "3", "--out", str(tmp_path)]) == 0
    table = capsys.readouterr().out
    results = json.loads((tmp_path / "results.json").read_text())["results"]
    assert [r["trainer"].split(" (")[0] for r in results] == ["ours", "ours", "TRL GRPOTrainer", "TRL GRPOTrainer"]
    assert {r["model"] for r in results} == {"check-sub", "check-add"}
    for r in results:
        assert r["steps"] >= 2 and r["step_s"] > 0 and r["step_tokens_s"] > 0 and 0 <= r["straggler"] <= 1
    assert all(r["gen_tokens_s"] > 0 for r in results[:2])  # ours times generation apart
    assert all(r["steps"] == gpu_recipe.CPU_CHECK.steps and r["mean_g"] == 16 for r in results[2:])
    assert "| TRL GRPOTrainer (transformers) | check-add |" in table
