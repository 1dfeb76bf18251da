"""What a run shows: the progress line, alone / rejoined, and a run log whose memory does not grow."""
import io
import re

from node.metrics import StepResult, SwarmMetrics
from node.observability.report import (
    Presence,
    RunLog,
    accuracy_over_time,
    format_step,
    plot_rewards,
    reward_windows,
    summary,
)


def result(step, reward=0.5, peers=0, **swarm):
    return StepResult(step, reward, 8, 4, 0.1, 0.2, 32, swarm=SwarmMetrics(peers=peers, **swarm))


def test_progress_line_of_an_unbounded_run_and_of_a_sharing_peer():
    assert format_step(result(4), 0, 1.0, [0.5]).startswith("step      5  reward 0.500")
    assert format_step(result(4), 10, 1.0, [0.5]).startswith("step    5/10  reward")
    alone = format_step(result(4), 10, 1.0, [0.5])
    assert "peers" not in alone
    shared = format_step(result(4, peers=3, polls=1, published=4, groups_received=16, groups_used=12,
                                rejected={"drawn": 2, "logprob": 1}), 10, 1.0, [0.5])
    assert "peers 3 out 4 in 16 used 12 rej 3 given 0 " in shared and "distrusted" not in shared
    warned = format_step(result(4, peers=3, polls=1, distrusted=1, demoted=2), 10, 1.0, [0.5])
    assert "rej 0 given 0 distrusted 1 demoted 2 " in warned


def test_presence_says_alone_once_and_rejoined_once():
    presence = Presence(patience=3)
    said = [presence.update(p) for p in (2, 0, 0, 0, 0, 0, 1, 1, 0)]
    assert said[:3] == [None, None, None]
    assert said[3].startswith("alone: no other peer seen for 3 steps")
    assert said[4:6] == [None, None]
    assert said[6] == "rejoined: 1 other peer seen; training on their groups again"
    assert said[7:] == [None, None]


def test_run_log_is_bounded_and_its_curve_keeps_the_mean():
    log = RunLog(total=0, window=50, points=64)
    rewards = [(i % 7) / 7 for i in range(10_000)]
    for i, r in enumerate(rewards):
        log.add(result(i, r))
    steps, curve = log.rewards_curve()
    assert len(curve) <= 67 and len(log.tail) == len(log.head) == 100 and len(log.gen) == 50  # unbounded: 100
    full = [c for c in curve[:-1]]  # whole buckets: each the mean of `bucket` consecutive rewards
    assert abs(full[0] - sum(rewards[: log.bucket]) / log.bucket) < 1e-9
    assert log.steps == 10_000 and steps[0] == log.bucket / 2
    assert "last 100 steps" in summary(log, 1.0)


def test_run_log_state_continues_the_curve_after_a_resume():
    first = RunLog(total=20)
    for i in range(10):
        first.add(result(i, 0.1 * (i % 2)))
    resumed = RunLog(total=20)
    resumed.load(first.state(), 10)
    for i in range(10, 20):
        resumed.add(result(i, 0.1 * (i % 2)))
    steps, curve = resumed.rewards_curve()
    assert len(curve) == 20 and steps[0] == 0.5 and resumed.resumed_at == 10
    text = summary(resumed, 1.0, 20)
    assert "10 (resumed after step 10)" in text and "reward, first 2 steps" in text  # this process's 10: 2 + 2


def test_summary_of_a_sharing_peer_counts_groups_and_rejections():
    log = RunLog(total=2)
    log.add(result(0, peers=2, polls=1, published=4, groups_received=8, groups_used=6, rejected={"drawn": 1}))
    log.add(result(1, peers=1, polls=1, published=4, groups_received=4, groups_used=4, distrusted=1, demoted=2))
    text = summary(log, 1.0, 2)
    assert "at most 2 at once, 1 at the last step" in text
    assert "distrusted for good 1 (false log-probs), demoted 2" in text
    assert "sent 8, received 12, trained on 10, uninformative 0" in text and "drawn 1" in text


def test_prometheus_endpoint_counts_by_reason():
    """The exporter in process: gauges hold the last step, counters add up steps, rejections by reason."""
    from test_checkpoint import scrape

    from node.observability.exporter import MetricsExporter
    from node.swarm.control import NodeStatus

    exporter = MetricsExporter(0, model="tiny-add", swarm="s")
    log = RunLog(total=2)
    exporter.watch(log.totals)  # the counters read the run's one running total, as `swarm run` / `join` wire it
    try:
        first = result(0, 0.25, peers=2, polls=1, published=4, groups_received=8, groups_used=6, bytes_in=1000,
                       bytes_out=300, rejected={"drawn": 2, "logprob": 1})
        first.eval = {"train/greedy": 0.5, "test/sampled": 0.125}
        second = result(1, 0.75, peers=1, polls=1, published=4, groups_received=2, bytes_in=10,
                        rejected={"drawn": 1}, distrusted=1, demoted=1, alignment=-0.25,
                        streams_refused={"rate": 2})
        for r in (first, second):
            log.add(r)
            exporter.update(r)
        got = scrape(exporter.port)
        summary_text = summary(log, 1.0, 2)
        reply = NodeStatus(totals=log.totals).to_reply()
    finally:
        exporter.close()
    # the summary, the control API and Prometheus read the same totals
    assert "sent 8, received 10, trained on 6" in summary_text and "drawn 3" in summary_text
    assert re.search(r"streams refused +rate 2 \(pulls of our bundles turned away", summary_text)
    assert got["swarm_streams_refused_total,reason=rate"] == 2
    assert (reply.groups_out, reply.groups_in, dict(reply.rejected), reply.distrusted, reply.demoted) == (
        8, 6, {"drawn": 3, "logprob": 1}, 1, 1)
    assert got["swarm_steps_total"] == 2 and got["swarm_reward"] == 0.75 and got["swarm_peers"] == 1
    assert got["swarm_groups_rejected_total,reason=drawn"] == 3
    assert got["swarm_groups_rejected_total,reason=logprob"] == 1
    assert got["swarm_groups_rejected_total,reason=signature"] == 0  # every reason is there before it happens
    assert (got["swarm_groups_sent_total"], got["swarm_groups_received_total"], got["swarm_groups_used_total"]) == (
        8, 10, 6)
    assert (got["swarm_bytes_in_total"], got["swarm_bytes_out_total"]) == (1010, 300)
    assert got["swarm_accuracy,kind=greedy,split=train"] == 0.5
    assert got["swarm_accuracy,kind=sampled,split=test"] == 0.125
    assert got["swarm_group_size"] == 8 and got["swarm_peer_info,model=tiny-add,swarm=s"] == 1
    assert (got["swarm_senders_distrusted_total"], got["swarm_senders_demoted_total"]) == (1, 1)
    assert got["swarm_alignment"] == -0.25


def test_swarm_local_compares_its_auc_with_the_alone_reference_of_the_same_settings(tmp_path, monkeypatch):
    import json
    import math

    from node.app import local_swarm
    from node.config import build_config
    from node.observability import report

    assert report.held_out_auc([0.25, 0.5, 0.75]) == 0.5 and math.isnan(report.held_out_auc([]))
    cfg = build_config(local_swarm.LOCAL_DEFAULTS)
    settings = local_swarm.reference_settings(cfg)
    assert settings == {"task": "digits", "steps": 150, "eval_every": 25, "prompts_per_step": 8, "eval_prompts": 256}
    path = tmp_path / "alone_reference.json"
    path.write_text(json.dumps({"digit-add": {"auc": 0.351, "seeds": 3, "settings": settings}}))
    monkeypatch.setattr(report, "ALONE_REFERENCE", path)
    line = local_swarm.alone_line("digit-add", 0.4123, cfg)
    assert line == ("held-out ID AUC 0.412 in the swarm vs 0.351 alone (mean of 3 Alone runs; "
                    "bench/experiments/results.py section 0)")
    path.write_text(json.dumps({"digit-add": {"auc": 0.351, "seeds": 3, "aucs": [0.34, 0.351, 0.362],
                                              "settings": settings}}))
    assert local_swarm.alone_line("digit-add", 0.4123, cfg) == (
        "held-out ID AUC 0.412 in the swarm vs 0.351 alone (mean of 3 Alone runs, which ranged 0.340-0.362, sd "
        "0.011: above every one; bench/experiments/results.py section 0)")
    assert "0.340-0.362, sd 0.011: within their range;" in local_swarm.alone_line("digit-add", 0.35, cfg)
    other = build_config({**local_swarm.LOCAL_DEFAULTS, "train": {"steps": 40, "prompts_per_step": 8}})
    assert "no Alone reference for digit-add with these settings" in local_swarm.alone_line("digit-add", 0.4, other)
    assert "no Alone reference for digit-sub" in local_swarm.alone_line("digit-sub", 0.4, cfg)
    path.write_text("{not json")  # a damaged file: no reference, no crash
    assert report.alone_reference("digit-add", settings, path) is None


def test_every_rejection_reason_the_code_counts_is_listed():
    """REJECTION_REASONS (exported at 0 before they happen) names every reason a record is rejected for: the
    RecordError reasons of protocol/ and node/, and those the exchange counts by name."""
    import re
    from pathlib import Path

    from node.metrics import REJECTION_REASONS

    root = Path(__file__).resolve().parents[1]
    sources = "\n".join(p.read_text() for folder in ("protocol", "node") for p in (root / folder).rglob("*.py"))
    found = set(re.findall(r'RecordError\(\s*"([a-z-]+)"', sources))
    found |= set(re.findall(r'_reject\(result, sender, "([a-z]+)"', sources))
    found |= set(re.findall(r'rejected\["([a-z]+)"\]', sources))
    found |= set(re.findall(r'return None, "([a-z]+)"', (root / "node" / "swarm" / "exchange.py").read_text()))
    assert len(found) >= 15 and found <= set(REJECTION_REASONS), found - set(REJECTION_REASONS)


def test_reward_windows_never_overlap():
    assert reward_windows([0.0] * 100, [1.0] * 100, 117, 100) == (58, 0.0, 1.0)  # 117 steps: halves, not 100s
    assert reward_windows([0.0, 0.5], [0.5, 1.0], 2, 100) == (1, 0.0, 1.0)
    n, first, last = reward_windows([0.0] * 100, [1.0] * 100, 10_000, 100)
    assert (n, first, last) == (100, 0.0, 1.0)
    assert reward_windows([0.25], [0.25], 1, 100)[0] == 0  # one step: nothing to compare
    log = RunLog(total=0)  # a join until stopped (window 100), resumed, 48 steps in this process
    for i in range(48):
        log.add(result(i, 0.0 if i < 24 else 1.0))
    text = summary(log, 1.0)
    rows = {line.split("  ")[1].strip(): line.split()[-1] for line in text.splitlines()}
    assert rows["reward, first 24 steps"] == "0.000" and rows["reward, last 24 steps"] == "1.000"


def test_held_out_accuracy_is_kept_over_time_and_survives_a_resume(tmp_path):
    log = RunLog(total=0, points=4)
    for i in range(60):
        r = result(i)
        if i == 0:
            r.eval_before = {"train/greedy": 0.1, "test/greedy": 0.0}
        if (i + 1) % 10 == 0:
            r.eval = {"train/greedy": 0.1 + (i + 1) / 100, "test/greedy": 0.01}
        log.add(r)
    assert log.evals[0] == [0, 0.1, 0.0] and log.evals[-1] == [60, 0.7, 0.01]
    assert len(log.evals) <= 4  # bounded: every other evaluation kept, the newest always
    resumed = RunLog(total=0)
    resumed.load(log.state(), 60)
    assert resumed.evals == log.evals
    assert accuracy_over_time([[0, 0.1, None], [25, 0.2, None], [50, None, 0.5]]) == "step 0 0.100, 25 0.200"
    evenly = accuracy_over_time([[s, s / 100, 0] for s in range(0, 101, 10)], points=3)
    assert evenly == "step 0 0.000, 50 0.500, 100 1.000"
    assert "held-out ID over time step 0 0.100, 40 0.500, 60 0.700" in " ".join(summary(log, 1.0).split())
    path = plot_rewards(*log.rewards_curve(), tmp_path / "p.png", "t", evals=log.evals)
    assert path.read_bytes()[:4] == b"\x89PNG"


def test_local_swarm_time_left_is_the_slowest_peers_at_its_measured_rate():
    from node.app.local_swarm import StepRate

    rate = StepRate()
    rate.see("a", 0, 0.0)  # (not past its first step: loading, joining)
    rate.see("a", 1, 10.0)
    rate.see("b", 2, 10.0)
    assert rate.seconds_left({"a": 2, "b": 3}, total=100, now=20.0) is None  # a rate needs 2 steps measured
    # a: 9 steps in 90 s (10 s a step), 90 to go; b: 18 in 90 s (5 s a step), 80 to go
    assert rate.seconds_left({"a": 10, "b": 20}, total=100, now=100.0) == 90 * 10.0
    assert rate.seconds_left({"a": 100, "b": 20}, total=100, now=100.0) == 80 * 5.0  # a finished: b's
    assert rate.seconds_left({"a": 100, "b": 100}, total=100, now=100.0) == 0.0


def test_the_console_is_one_table_on_a_terminal_and_one_line_a_period_in_a_log():
    from rich.console import Console

    from node.app.local_swarm import alone_at_end, live_table, one_line

    runs = {"p0": [result(i, peers=1, groups_used=3) for i in range(4)] + [result(4, peers=0)], "p1": []}
    console = Console(width=120, record=True, file=io.StringIO())
    console.print(live_table(["p0", "p1"], runs, {"p0": None, "p1": None}, 10, "[30 s, about 2 min left]"))
    text = console.export_text()
    assert "[30 s, about 2 min left]" in text and text.count("p0") == 1 and text.count("p1") == 1
    assert re.search(r"p0 +│ +5/10 +│ +0\.500 +│ +8 +│ +0 +│ +0 +│ +0 +│ running, alone", text), text
    assert re.search(r"p1 +│ +- │", text) and "starting" in text
    line = one_line(["p0", "p1"], runs, "[60 s]")
    assert line == "[60 s] p0 step 5 reward 0.500 peers 0; p1 starting" and "\n" not in line
    assert alone_at_end(runs["p0"]) == 1 and alone_at_end([result(0), result(1)]) == 0  # never met anyone


def test_tensorboard_scalars_name_every_figure_of_a_step():
    from node.observability.tensorboard import accuracy_scalars, scalars

    r = result(4, 0.25, peers=2, polls=1, published=4, groups_received=8, groups_used=6,
               rejected={"drawn": 2, "logprob": 1}, credited=9)
    r.eval = {"train/greedy": 0.5, "test/greedy": 0.125}
    tags = scalars(r)
    assert (tags["reward"], tags["swarm/peers"], tags["swarm/groups_used"], tags["swarm/rejected"]) == (0.25, 2, 6, 3)
    assert (tags["swarm/given"], tags["accuracy/train_greedy"], tags["accuracy/test_greedy"]) == (9, 0.5, 0.125)
    assert accuracy_scalars({"train/sampled": 0.25}) == {"accuracy/train_sampled": 0.25}


def test_a_model_is_announced_by_a_name_that_says_nothing_of_the_volunteers_disk(tmp_path):
    from node.models.loading import DISPLAY_NAME, display_name

    assert display_name("digit-add") == "digit-add"
    assert display_name("Qwen/Qwen2.5-0.5B-Instruct") == "Qwen/Qwen2.5-0.5B-Instruct"
    folder = tmp_path / "home" / "alice" / "my-run"
    folder.mkdir(parents=True)
    assert display_name(str(folder)) == "my-run"
    assert len(display_name(str(tmp_path / ("x" * 200)))) == DISPLAY_NAME
