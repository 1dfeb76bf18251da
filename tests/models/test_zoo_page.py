"""The results page's models start where the page says: the shipped weights, loaded here, give the held-out
greedy pass@1 before any update that every run of docs/results/runs measured (its models table)."""
from pathlib import Path

import pytest

from bench.experiments import grid, report, runner, runs
from node.evaluation import as_metrics, evaluate
from node.peer import Peer

ROOT = Path(__file__).resolve().parents[2]
RUNS = ROOT / "docs" / "results" / "runs"
SLACK = 2 / 256  # two prompts of the 256: greedy decoding of the same weights may break a near-tie otherwise
#                   on another CPU's kernels (the files themselves are checked against the manifest's SHA-256)


@pytest.mark.parametrize("model", grid.VERDICT_PAIRS["complementary"])
def test_a_fresh_clone_reproduces_the_pages_step0_accuracy(model):
    stated = report.step0_figures(runs.load(RUNS))[model]
    assert all(len(values) == 1 for values in stated.values()), stated  # one figure per metric across runs
    run = grid.Run("verdict", (model,), "alone", 0, 1, 1)
    peer = Peer(runner.peer_config(run, model, {}))  # the configuration the page's runs had
    try:
        scores, _ = evaluate(peer.backend, peer.loaded.tokenizer, peer.eval_task, peer.cfg.eval)
    finally:
        peer.close()
    here = as_metrics(scores)
    assert set(here) == set(stated)
    for key, (value,) in stated.items():
        assert here[key] == pytest.approx(value, abs=SLACK), key
