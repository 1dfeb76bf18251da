"""The paper-tables harness in smoke mode (a few steps, one seed, every section): it runs, writes its report
with tables and plots, and a second invocation resumes instead of redoing anything."""
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.experiments import grid, runner, runs, stats

ROOT = Path(__file__).resolve().parents[1]


def test_paired_interval_and_equal_time_interpolation():
    mean, half = stats.paired_interval([0.1, 0.2, 0.3])
    assert mean == pytest.approx(0.2) and half == pytest.approx(4.303 * 0.1 / math.sqrt(3))
    assert math.isnan(stats.paired_interval([0.5])[1])
    evals = [{"seconds": 0.0, "a": 0.0}, {"seconds": 10.0, "a": 1.0}, {"seconds": 20.0, "a": 0.5}]
    assert stats.at_seconds(evals, "a", 5.0) == pytest.approx(0.5)
    assert stats.at_seconds(evals, "a", 15.0) == pytest.approx(0.75)
    assert stats.at_seconds(evals, "a", 99.0) == 0.5  # beyond the run: its last evaluation
    alone = [{"seconds": 0.0, "a": 0.0}, {"seconds": 5.0, "a": 0.2}, {"seconds": 10.0, "a": 0.2},
             {"seconds": 15.0, "a": 0.2}]
    assert stats.final(alone, "a") == pytest.approx(0.2)  # the last three evaluations
    assert stats.equal_time(evals, alone, "a") == pytest.approx((0.5 + 1.0 + 0.75) / 3)


def test_plan_shares_alone_runs_across_pairs():
    runs = grid.plan(3, 10, 5, {"ftis"})
    alone = [r for r in runs if r.policy == "alone"]
    assert len(alone) == 3 * 5  # five zoo models in the four pairs, three seeds
    assert len(runs) - len(alone) == 3 * 4 * 6
    only = grid.plan(3, 10, 5, {"ftis"}, ("tokenizer",), ("alone", "nois", "f-tis"))
    assert sorted({r.models for r in only}) == [("tiny-add-bpe",), ("tiny-add-bpe", "tiny-sub"), ("tiny-sub",)]
    assert len(only) == 3 * 2 + 3 * 2
    assert len({r.key for r in runs}) == len(runs)


def test_verdict_plan_has_every_control_and_shares_alone_runs():
    runs = grid.plan(8, 150, 25, {"verdict"})
    primary = grid.VERDICT_PAIRS["complementary"]
    cells = {(r.models, r.label) for r in runs if r.seed == 0 and set(r.models) <= set(primary)}
    assert cells == {((m,), "Alone") for m in primary} | {((m,), "Alone-2x") for m in primary} | {
        (primary, label) for label in ("NoIS", "F-TIS", "success-gated", "F-TIS-seq", "verified-imitation",
                                        "imitation, floor 0", "imitation, floor 2", "F-TIS-or", "HACPO")}
    assert {r.seed for r in runs if r.models == primary} == set(range(8))  # the primary pair: every seed
    for label in grid.REFERENCE_CELLS:  # the reference ablation: every seed, on each of its pairs
        for name in grid.REFERENCE_PAIRS:
            pair = grid.VERDICT_PAIRS[name]
            seeds = {r.seed for r in runs if r.label == label and (r.models == pair or set(r.models) < set(pair))}
            assert seeds == set(range(8)), (label, name)
    long = [r for r in runs if set(r.models) <= set(grid.VERDICT_PAIRS["long"])]
    assert long and all(r.settings[:2] == grid.PAIR_SETTINGS["long"] for r in long)  # its task, Alone runs too
    check = runner.peer_config(next(r for r in long if r.label == "Alone-2x"), "check-sub", {})
    assert (check.task.name, check.train.prompts_per_step) == ("digits-check", 16)
    for label in grid.ABLATION_CELLS:  # the fixes tried and their parts: 3
        assert {r.seed for r in runs if r.label == label} == {0, 1, 2}, label
    assert {r.seed for r in runs if r.models == grid.VERDICT_PAIRS["lora"]} == {0, 1}  # secondary: 2
    assert len({r.key for r in runs}) == len(runs)  # a model's Alone runs serve every pair it is in
    assert sum(r.models == ("digit-sub-bpe",) and r.label == "Alone" for r in runs) == 8  # primary and secondary
    assert sum(r.models == ("digit-add",) and r.label == "Alone" for r in runs) == 2  # the secondary pairs only
    page = grid.plan(8, 150, 25, {"verdict"}, verdict_pairs=grid.PAGE_PAIRS,
                             verdict_cells=grid.PAGE_CELLS)  # the page's default: no char pair, no fixes
    assert not {r.label for r in page} & set(grid.ABLATION_CELLS) - {"success-gated"}
    assert not any(r.models == grid.VERDICT_PAIRS["char"] for r in page)
    assert {r.seed for r in page if r.label == "success-gated"} == {0, 1, 2}  # the cheap baseline: ABLATION_SEEDS
    assert {r.seed for r in page if r.label == "Alone-2x"} == set(range(8))
    few = grid.plan(5, 150, 25, {"verdict"}, verdict_pairs=("complementary",),
                            verdict_cells=("Alone", "verified-imitation"))
    assert sorted({r.label for r in few}) == ["Alone", "verified-imitation"] and len(few) == 5 * 3
    double = next(r for r in runs if r.label == "Alone-2x")
    single = next(r for r in runs if r.label == "Alone" and r.models == double.models and r.seed == double.seed)
    assert double.cost == 2 * single.cost
    cfg = {m: runner.peer_config(double, m, {}) for m in double.models}
    assert [c.train.prompts_per_step for c in cfg.values()] == [16]  # twice the base's 8
    assert runner.peer_config(double, double.models[0], {"train": {"prompts_per_step": 4}}
                                    ).train.prompts_per_step == 8  # twice the smoke scale's
    base = runner.peer_config(single, single.models[0], {})
    assert (base.task.name, base.train.group_policy, base.generation.max_new_tokens) == ("digits", "sagc", 64)
    assert base.train.seed == runner.peer_config(
        next(r for r in runs if r.models == primary and r.seed == single.seed), single.models[0], {}).train.seed


def test_the_reference_table_names_the_winner_and_checks_the_goal():
    """verified-imitation: +0.08 ± 0.02 over Alone-2x for both peers, ID and OOD (the goal's +0.05 cleared);
    F-TIS: level with Alone-2x but one peer below Alone beyond noise, so it cannot win; NoIS never ran."""
    from bench.experiments import report

    figures = {}
    for model in grid.VERDICT_PAIRS["long"]:
        for endpoint in ("ID AUC, equal steps", "ID AUC, equal time", "OOD AUC, equal steps"):
            figures[("long", model, "verified-imitation - Alone-2x", endpoint)] = (0.08, 0.02, 6)
            figures[("long", model, "F-TIS - Alone-2x", endpoint)] = (0.09, 0.02, 6)
        figures[("long", model, "verified-imitation - Alone", "ID AUC, equal steps")] = (0.1, 0.02, 6)
        figures[("long", model, "F-TIS - Alone", "ID AUC, equal steps")] = (
            (-0.05, 0.02, 6) if model == "check-add" else (0.01, 0.02, 6))
    lines = report.reference_table(figures)
    text = "\n".join(lines)
    assert "| long | verified-imitation | check-sub | 6 | +0.080 ± 0.020 | +0.080 ± 0.020 | +0.080 ± 0.020 | " \
           "+0.100 ± 0.020 |" in text
    assert "| long | `digits-check` | verified-imitation (+0.080 for the peer it helps least) | " \
           "F-TIS, verified-imitation | F-TIS |" in text
    assert "| complementary |" not in text and not any("| NoIS |" in line for line in lines)
    assert report.reference_table({}) == []


def test_beyond_noise_is_the_whole_interval_on_one_side():
    from bench.experiments import report

    assert report.above(0.08, 0.02) and report.above(0.08, 0.02, 0.05) and not report.above(0.06, 0.02, 0.05)
    assert not report.above(0.02, 0.03) and not report.above(0.5, math.nan)  # within noise; one seed
    assert report.below(-0.05, 0.02) and not report.below(-0.01, 0.02) and not report.below(-0.5, math.nan)
    assert report.verdict_word(-0.05, 0.02) == "-0.050 ± 0.020, below 0 beyond noise"
    assert report.verdict_word(0.08, 0.02, 0.05) == "+0.080 ± 0.020, above +0.05 beyond noise"


def test_auc_equal_time_and_power():
    evals = [{"step": 0, "seconds": 0.0, "a": 0.1}, {"step": 10, "seconds": 10.0, "a": 0.3},
             {"step": 20, "seconds": 20.0, "a": 0.5}]
    assert stats.auc(evals, "a") == pytest.approx(0.4)  # step 0 is not in the area
    slow = [{"step": 0, "seconds": 0.0, "a": 0.1}, {"step": 10, "seconds": 40.0, "a": 0.9},
            {"step": 20, "seconds": 80.0, "a": 0.9}]
    mine, other = stats.auc_at_equal_time(evals, slow, "a")  # over the first 20 s, at 10 s and 20 s
    assert mine == pytest.approx(0.4) and other == pytest.approx((0.3 + 0.5) / 2)
    sd, achieved, needed = stats.power([0.05, 0.07, 0.03, 0.05])
    assert sd == pytest.approx(statistics.stdev([0.05, 0.07, 0.03, 0.05]))
    z = statistics.NormalDist()
    assert achieved == pytest.approx(z.cdf(0.05 * 2 / sd - 3.182))
    assert needed == 3  # sd 0.016: three seeds see +0.05 with 80%; two do not
    assert z.cdf(0.05 * math.sqrt(2) / sd - 12.706) < 0.8 <= z.cdf(0.05 * math.sqrt(3) / sd - 4.303)
    assert math.isnan(stats.power([0.1])[0])


def test_sagc_time_to_reach_target():
    curve = [(0.0, 0.1), (10.0, 0.3), (20.0, 0.5)]
    assert stats.time_to_reach(curve, 0.4) == pytest.approx(15.0)  # halfway between 0.3 and 0.5
    assert stats.time_to_reach(curve, 0.05) == 0.0 and math.isinf(stats.time_to_reach(curve, 0.6))
    assert stats.time_to_reach([(0.0, 0.1), (5.0, 0.45), (9.0, 0.2), (12.0, 0.5)], 0.4) == pytest.approx(
        5.0 * 0.3 / 0.35)  # the first crossing, not a later one
    peers = {"peer0": [(0.0, 0.2), (10.0, 0.4)], "peer1": [(0.0, 0.0), (14.0, 0.6), (30.0, 0.7)]}
    assert stats.swarm_curve(peers) == [(0.0, pytest.approx(0.1)), (12.0, pytest.approx(0.5))]


def test_runs_recorded_under_the_old_names_read_as_the_policies_they_are():
    """A run recorded before the transfer policies had names (loss.variant and loss settings) is read as the same
    rule under its current name, so the page's committed runs still fill its cells."""
    old = {"section": "verdict", "models": ["a", "b"], "variant": "f-tis", "seed": 0, "steps": 5, "eval_every": 5,
           "settings": [["swarm.received_baseline", "greedy"], ["loss.received_floor", "1"]], "label": "F-TIS-gated"}
    now = runs.current_run(old)
    assert (now["policy"], now["settings"], now["label"]) == ("verified-imitation", [], "verified-imitation")
    f2 = runs.current_run({**old, "settings": [["swarm.received_baseline", "greedy"],
                                                       ["loss.received_floor", "2"]], "label": "F-TIS-gated-f2"})
    assert (f2["policy"], f2["settings"], f2["label"]) == ("verified-imitation", [["transfer.floor", "2"]],
                                                            "imitation, floor 2")
    seq = runs.current_run({**old, "settings": [["loss.received_weights", "sequence"]], "label": "F-TIS-seq"})
    assert (seq["policy"], seq["settings"]) == ("f-tis", [["transfer.sequence_weights", "true"]])
    outcome = runs.current_run({**old, "variant": "outcome", "settings": [], "label": "outcome"})
    assert (outcome["policy"], outcome["label"]) == ("success-gated", "success-gated")
    floor_only = runs.current_run({**old, "settings": [["loss.received_floor", "1"]], "label": "F-TIS+floor"})
    assert floor_only["policy"] not in grid.VERDICT_CELLS  # a rule no policy is: no cell asks for it
    assert runs.current_run(now) == now
    cell = dict((label, (policy, settings)) for label, policy, settings in grid.VERDICT_CELLS)
    assert cell[now["label"]] == (now["policy"], ()) and cell[f2["label"]] == (f2["policy"], (("transfer.floor", "2"),))


def test_mixed_tokenizer_plan_and_drawdown():
    runs = grid.plan(3, 10, 5, {"mixed"})
    zoo = grid.MIXED["zoo"]
    assert len(runs) == 3 * (3 + 5) and len({r.key for r in runs}) == len(runs)
    swarm = [r for r in runs if r.models == zoo]
    assert sorted({(r.label, r.policy) for r in swarm}) == [
        ("F-TIS, foreign rows by weight", "f-tis"), ("F-TIS, no demotion", "f-tis"),
        ("cross-tokenizer F-TIS", "f-tis"), ("ratio = 1", "nois"), ("skip foreign", "f-tis")]
    skip = next(r for r in swarm if r.label == "skip foreign")
    assert ("swarm.foreign_tokenizers", "false") in skip.settings and "foreign_tokenizers=false" in skip.key
    off = next(r for r in swarm if r.label == "F-TIS, no demotion")
    assert ("trust.harm_bound", "0") in off.settings and "harm_bound=0" in off.key
    by_weight = next(r for r in swarm if r.label == "F-TIS, foreign rows by weight")
    assert ("transfer.foreign_rows", "weight") in by_weight.settings and "foreign_rows=weight" in by_weight.key
    assert {r.models for r in runs if r.policy == "alone"} == {(m,) for m in zoo}
    smoke = grid.plan(1, 3, 2, {"mixed"}, smoke=True)  # the smoke run: the first three policies
    assert {r.label for r in smoke if r.models == zoo} == {"skip foreign", "ratio = 1", "cross-tokenizer F-TIS"}
    smol = grid.plan(1, 10, 5, {"mixed"}, mixed=("smollm2",),
                             mixed_policies=("cross-tokenizer F-TIS", "F-TIS, no demotion", "skip foreign"))
    assert {r.label for r in smol} == {"cross-tokenizer F-TIS", "F-TIS, no demotion", "skip foreign"}
    assert len(smol) == 3 and all("smollm2-135m" in r.models and ("train.prompts_per_step", "4") in r.settings
                                  for r in smol)
    lr = {m: runner.peer_config(smol[0], m, {}).train.lr for m in smol[0].models}
    assert lr == {"tiny-add": 0.0, "tiny-sub": 0.0, "tiny-add-bpe": 0.0, "smollm2-135m": 1e-5}  # one model's setting
    assert stats.drawdown([0.1, 0.5, 0.3, 0.6, 0.2, 0.4]) == pytest.approx(0.4)
    assert stats.drawdown([0.1, 0.2, 0.2, 0.3]) == 0.0


@pytest.mark.slow
def test_smoke_run_writes_the_report_and_resumes(tmp_path):
    out, results = tmp_path / "runs", tmp_path / "docs" / "RESULTS.md"
    cmd = [sys.executable, "-m", "bench.experiments.results", "--smoke", "--out", str(out),
           "--results", str(results)]
    first = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=900, check=False)
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-3000:]
    text = results.read_text()
    for heading in ("## 0. The verdict: does joining pay? (tasks `digits` and `digits-check`)",
                    "| digit-add-bpe | Alone-2x | 1 |",
                    "| digit-sub-bpe | F-TIS − Alone-2x | ID AUC, equal time |", "ID AUC per kind of problem",
                    "## The earlier testbed (task `arith`)", "## 1. F-TIS table",
                    "### The claims, checked", "## 2. Ablations", "## 3. SAPO's mix",
                    "## 4. SAGC where completions straggle", "## Real models", "## 5. Mixed tokenizers",
                    "| 5. Mixed tokenizers | 6 | 3 | 1 |"):
        assert heading in text, heading
    assert "| expertise | tiny-sub |" in text
    assert "| tiny-add-bpe | cross-tokenizer F-TIS |" in text
    for png in ("verdict_complementary", "ftis_expertise", "mix", "mixed_zoo"):
        assert (results.parent / "results" / f"{png}.png").read_bytes()[:4] == b"\x89PNG"
    reference = json.loads((results.parent / "results" / "alone_reference.json").read_text())
    assert set(reference) == {"digit-sub-bpe", "digit-add-bpe"}  # `swarm local` reads it
    assert reference["digit-add-bpe"]["seeds"] == 1
    assert reference["digit-add-bpe"]["settings"]["prompts_per_step"] == 4
    done = sorted(p.name for p in out.glob("*.json"))
    one = json.loads((out / next(n for n in done if n.startswith("ftis_tiny-sub+tiny-add_f-tis"))).read_text())
    evals = one["peers"]["tiny-sub#0"]["evals"]
    # provenance: the commit and the command, with the zoo when it is not the shipped one
    zoo = os.environ.get("SWARM_ZOO_DIR")
    assert one["commit"] and one["command"].startswith(
        (f"SWARM_ZOO_DIR={zoo} " if zoo else "") + "python -m bench.experiments.results --smoke")
    assert [e["step"] for e in evals] == [0, 2, 3] and all(0 <= e["train/greedy"] <= 1 for e in evals)
    again = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=300, check=False)
    planned = grid.plan(1, 3, 2, {"verdict", "ftis", "ablation", "mix", "mixed"}, pairs=("expertise",),
                                variants=grid.SMOKE_VARIANTS, verdict_pairs=("complementary",),
                                smoke=True)
    assert again.returncode == 0 and f"({len(planned)} done before)" in again.stdout, again.stdout
    assert sorted(p.name for p in out.glob("*.json")) == done


def test_transfer_columns_table_reads_scores_by_operator_and_columns():
    from bench.experiments import transfer_columns

    results = [{"m": {"cell": "Alone-2x", "start": {"+1": [1.0, 0.0], "-2": [1.0]},
                      "end": {"+1": [1.0, 1.0], "-2": [0.0], "+3": [0.0, 0.0, 1.0]}}},
               {"m": {"cell": "verified-imitation", "start": {"+1": [1.0, 0.0]},
                      "end": {"+1": [0.0, 1.0], "-2": [1.0]}}}]
    assert transfer_columns.table(results, ("m",)) == [
        "| model | operator | cell | 1 col | 2 col | 3 col |", "|---|---|---|---|---|---|",
        "| m | sum | step 0 | 0.50 (2) | - | - |",
        "| m | sum | Alone-2x | 1.00 (2) | - | 0.33 (3) |",
        "| m | sum | verified-imitation | 0.50 (2) | - | - |",
        "| m | difference | step 0 | - | 1.00 (1) | - |",
        "| m | difference | Alone-2x | - | 0.00 (1) | - |",
        "| m | difference | verified-imitation | - | 1.00 (1) | - |"]


POOL_SCRIPT = """
import concurrent.futures, multiprocessing, os, sys, time
from node.system.process import die_with_parent
pool = concurrent.futures.ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn"),
                                              initializer=die_with_parent, initargs=(os.getpid(),))
running = [pool.submit(time.sleep, 600) for _ in range(2)]
for _ in range(1200):  # both workers started (bounded: 120 s)
    if len(multiprocessing.active_children()) == 2:
        break
    time.sleep(0.1)
print(" ".join(str(p.pid) for p in multiprocessing.active_children()), flush=True)
time.sleep(600)
"""


def alive(pid: int) -> bool:
    """Whether `pid` is a running process (a zombie, dead but not yet reaped, counts as gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parent-death signal: Linux only")
def test_the_benchmark_pool_workers_end_when_the_benchmark_is_killed():
    """The results harness runs its experiments in a process pool whose workers die with it (die_with_parent): a
    benchmark stopped with SIGKILL (or SIGTERM, whose default is the same end) leaves no worker training on."""
    proc = subprocess.Popen([sys.executable, "-c", POOL_SCRIPT], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        workers = [int(p) for p in proc.stdout.readline().split()]
        assert len(workers) == 2 and all(alive(p) for p in workers)
    finally:
        proc.kill()
        proc.wait()
    for _ in range(600):  # bounded: 60 s
        if not any(alive(p) for p in workers):
            break
        time.sleep(0.1)
    assert not any(alive(p) for p in workers), "a pool worker outlived the benchmark that started it"


def test_a_run_records_its_commit_dirty_only_for_code(tmp_path):
    """A benchmark rewrites its page's figures under docs/results: that leaves the commit clean; a changed source
    file marks it dirty; outside a repository the commit is unknown."""
    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    assert runs.source_commit(tmp_path) == "unknown"
    git("init", "-q")
    (tmp_path / "docs" / "results").mkdir(parents=True)
    (tmp_path / "docs" / "results" / "figures.json").write_text("{}")
    (tmp_path / "code.py").write_text("x = 1\n")
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "first")
    head = runs.source_commit(tmp_path)
    assert len(head) == 7 and not head.endswith("-dirty")
    (tmp_path / "docs" / "results" / "figures.json").write_text('{"a": 1}')
    (tmp_path / "docs" / "results" / "new_run.json").write_text("{}")
    assert runs.source_commit(tmp_path) == head
    (tmp_path / "code.py").write_text("x = 2\n")
    assert runs.source_commit(tmp_path) == f"{head}-dirty"
