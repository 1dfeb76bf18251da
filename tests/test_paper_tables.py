"""The paper-tables harness in smoke mode (a few steps, one seed, every section): it runs, writes its report
with tables and plots, and a second invocation resumes instead of redoing anything."""
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import paper_tables  # noqa: E402


def test_paired_interval_and_equal_time_interpolation():
    mean, half = paper_tables.paired_interval([0.1, 0.2, 0.3])
    assert mean == pytest.approx(0.2) and half == pytest.approx(4.303 * 0.1 / math.sqrt(3))
    assert math.isnan(paper_tables.paired_interval([0.5])[1])
    evals = [{"seconds": 0.0, "a": 0.0}, {"seconds": 10.0, "a": 1.0}, {"seconds": 20.0, "a": 0.5}]
    assert paper_tables.at_seconds(evals, "a", 5.0) == pytest.approx(0.5)
    assert paper_tables.at_seconds(evals, "a", 15.0) == pytest.approx(0.75)
    assert paper_tables.at_seconds(evals, "a", 99.0) == 0.5  # beyond the run: its last evaluation
    alone = [{"seconds": 0.0, "a": 0.0}, {"seconds": 5.0, "a": 0.2}, {"seconds": 10.0, "a": 0.2},
             {"seconds": 15.0, "a": 0.2}]
    assert paper_tables.final(alone, "a") == pytest.approx(0.2)  # the last three evaluations
    assert paper_tables.equal_time(evals, alone, "a") == pytest.approx((0.5 + 1.0 + 0.75) / 3)


def test_plan_shares_alone_runs_across_pairs():
    runs = paper_tables.plan(3, 10, 5, {"ftis"})
    alone = [r for r in runs if r.variant == "alone"]
    assert len(alone) == 3 * 5  # five zoo models in the four pairs, three seeds
    assert len(runs) - len(alone) == 3 * 4 * 6
    only = paper_tables.plan(3, 10, 5, {"ftis"}, ("tokenizer",), ("alone", "nois", "f-tis"))
    assert sorted({r.models for r in only}) == [("tiny-add-bpe",), ("tiny-add-bpe", "tiny-sub"), ("tiny-sub",)]
    assert len(only) == 3 * 2 + 3 * 2
    assert len({r.key for r in runs}) == len(runs)


def test_mixed_tokenizer_plan_and_drawdown():
    runs = paper_tables.plan(3, 10, 5, {"mixed"})
    zoo = paper_tables.MIXED["zoo"]
    assert len(runs) == 3 * (3 + 3) and len({r.key for r in runs}) == len(runs)
    swarm = [r for r in runs if r.models == zoo]
    assert sorted({(r.label, r.variant) for r in swarm}) == [
        ("cross-tokenizer F-TIS", "f-tis"), ("ratio = 1", "nois"), ("skip foreign", "f-tis")]
    skip = next(r for r in swarm if r.label == "skip foreign")
    assert ("swarm.foreign_tokenizers", "false") in skip.settings and "foreign_tokenizers=false" in skip.key
    assert {r.models for r in runs if r.variant == "alone"} == {(m,) for m in zoo}
    smol = paper_tables.plan(1, 10, 5, {"mixed"}, mixed=("smollm2",))
    assert len(smol) == 3 and all("smollm2-135m" in r.models and ("train.prompts_per_step", "4") in r.settings
                                  for r in smol)
    lr = {m: paper_tables.peer_config(smol[0], m, {}).train.lr for m in smol[0].models}
    assert lr == {"tiny-add": 0.0, "tiny-sub": 0.0, "tiny-add-bpe": 0.0, "smollm2-135m": 1e-5}  # one model's setting
    assert paper_tables.drawdown([0.1, 0.5, 0.3, 0.6, 0.2, 0.4]) == pytest.approx(0.4)
    assert paper_tables.drawdown([0.1, 0.2, 0.2, 0.3]) == 0.0


@pytest.mark.slow
def test_smoke_run_writes_the_report_and_resumes(tmp_path):
    out, results = tmp_path / "runs", tmp_path / "docs" / "RESULTS.md"
    cmd = [sys.executable, str(ROOT / "bench" / "paper_tables.py"), "--smoke", "--out", str(out),
           "--results", str(results)]
    first = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=900, check=False)
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-3000:]
    text = results.read_text()
    for heading in ("## 1. F-TIS table", "### The claims, checked", "## 2. Ablations", "## 3. SAPO's mix",
                    "## 4. SAGC in a real local swarm", "## 5. Mixed tokenizers",
                    "| 5. Mixed tokenizers | 6 | 3 | 1 |"):
        assert heading in text, heading
    assert "| expertise | tiny-sub |" in text and "| sagc |" in text
    assert "| tiny-add-bpe | cross-tokenizer F-TIS |" in text
    for png in ("ftis_size", "ftis_expertise", "ftis_lora", "ftis_tokenizer", "mix", "mixed_zoo"):
        assert (results.parent / "results" / f"{png}.png").read_bytes()[:4] == b"\x89PNG"
    done = sorted(p.name for p in out.glob("*.json"))
    one = json.loads((out / next(n for n in done if n.startswith("ftis_tiny-sub+tiny-add_f-tis"))).read_text())
    evals = one["peers"]["tiny-sub#0"]["evals"]
    # provenance: the commit and the command, with the zoo when it is not the shipped one
    zoo = os.environ.get("SWARM_ZOO_DIR")
    assert one["commit"] and one["command"].startswith(
        (f"SWARM_ZOO_DIR={zoo} " if zoo else "") + "python bench/paper_tables.py --smoke")
    assert [e["step"] for e in evals] == [0, 2, 3] and all(0 <= e["train/greedy"] <= 1 for e in evals)
    again = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=300, check=False)
    planned = paper_tables.plan(1, 3, 2, {"ftis", "ablation", "mix", "mixed"})
    assert again.returncode == 0 and f"({len(planned)} done before)" in again.stdout, again.stdout
    assert sorted(p.name for p in out.glob("*.json")) == done
