"""deploy/: the compose file's entrypoints are real CLI invocations, and the file validates."""
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

import swarm_cli

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = ROOT / "deploy" / "docker-compose.yml"


def services():
    """The swarm's nodes (the bootstrap and the peers: the swarm-node image), without the monitoring services."""
    return {name: svc for name, svc in yaml.safe_load(COMPOSE.read_text())["services"].items()
            if svc["image"].startswith("swarm-node:")}


def test_every_service_command_parses_with_the_cli():
    parser = swarm_cli.build_parser()
    commands = {name: svc["command"] for name, svc in services().items()}
    assert set(commands) >= {"bootstrap", "peer-add", "peer-sub", "peer-lora", "peer-gpu"}
    for name, command in commands.items():
        try:
            args = parser.parse_args(command)
        except SystemExit:
            pytest.fail(f"{name}: {command} is not a valid swarm command")
        assert args.command == ("bootstrap" if name == "bootstrap" else "join")


def test_peers_are_heterogeneous_with_health_checks_and_volumes():
    svc = services()
    models = {name: s["command"][s["command"].index("--model") + 1] for name, s in svc.items() if name != "bootstrap"}
    assert {"digit-add-bpe", "digit-sub-bpe", "digit-add-bpe-lora", "digit-add"} <= set(models.values())
    tasks = {s["command"][s["command"].index("--task") + 1] for name, s in svc.items() if name != "bootstrap"}
    assert tasks == {"digits"}  # the testbed where sharing pays (docs/RESULTS.md)
    for name, s in svc.items():
        test = s["healthcheck"]["test"]
        assert test[1:3] == ["swarm", "status"] and "--health" in test, name
        assert any(v.startswith("identities:") for v in s["volumes"]), name
    assert svc["peer-gpu"]["profiles"] == ["gpu"]
    parser = swarm_cli.build_parser()
    for name, s in svc.items():  # docker's SIGKILL comes after the node's own (forced) stop
        stop_timeout = parser.parse_args(s["command"]).stop_timeout
        assert int(s["stop_grace_period"].rstrip("s")) > stop_timeout, name
        if name != "bootstrap":  # time to end a step and write a checkpoint
            assert stop_timeout >= 60 and s["restart"] == "unless-stopped", name
    assert all(any(v.startswith("checkpoints:") for v in svc[n]["volumes"]) for n in models)


@pytest.mark.skipif(shutil.which("docker-compose") is None, reason="Debian's docker-compose is not installed")
def test_compose_file_validates(tmp_path):
    out = subprocess.run(["docker-compose", "-f", str(COMPOSE), "config"], capture_output=True, text=True,
                         timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    assert "peer-lora" in out.stdout
    doc = yaml.safe_load(COMPOSE.read_text())
    doc["services"]["peer-add"]["bogus_key"] = 1
    bad = tmp_path / "docker-compose.yml"
    bad.write_text(yaml.safe_dump(doc))
    out = subprocess.run(["docker-compose", "-f", str(bad), "config"], capture_output=True, text=True,
                         timeout=120, check=False)
    assert out.returncode != 0 and "bogus_key" in out.stderr


def test_gpu_profile_generates_with_vllm_and_cpu_peers_with_transformers():
    from node.config import config_from_args

    parser = swarm_cli.build_parser()
    backends = {}
    for name, svc in services().items():
        if name != "bootstrap":  # the CLI's own path from a command line to a configuration
            backends[name] = config_from_args(parser.parse_args(svc["command"]), swarm_cli.JOIN_DEFAULTS).generation
    assert backends["peer-gpu"].backend == "vllm" and backends["peer-gpu"].vllm_gpu_memory == 0.3
    assert {b.backend for n, b in backends.items() if n != "peer-gpu"} == {"transformers"}
    build = services()["peer-gpu"]["build"]["args"]
    assert build["EXTRAS"] == "[vllm]" and build["TORCH_VERSION"] == "2.14.0"  # vllm 0.33.0 pins torch 2.14.0
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text()
    assert 'pip install --no-cache-dir ".${EXTRAS}"' in dockerfile and "torch==${TORCH_VERSION}" in dockerfile


def exported_metric_names() -> set[str]:
    """What a peer's Prometheus endpoint serves, scraped from a real exporter (counters end in _total)."""
    import urllib.request

    from node.metrics import StepResult
    from node.observability.exporter import MetricsExporter
    from node.observability.report import RunLog

    exporter = MetricsExporter(0, model="digit-add", swarm="compose")
    log = RunLog(total=1)
    exporter.watch(log.totals)
    result = StepResult(0, 0.5, 8, 4, 0.1, 0.2, 32)
    result.eval = {"train/greedy": 0.5, "test/greedy": 0.0}
    exporter.update(result)
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{exporter.port}/metrics", timeout=30).read().decode()
    finally:
        exporter.close()
    return {line.split("{")[0].split()[0] for line in text.splitlines() if line and not line.startswith("#")}


def test_monitoring_every_grafana_panel_names_metrics_a_peer_exports():
    import json
    import re

    svc = yaml.safe_load(COMPOSE.read_text())["services"]
    assert svc["prometheus"]["profiles"] == svc["grafana"]["profiles"] == ["monitoring"]
    prometheus = yaml.safe_load((ROOT / "deploy" / "prometheus.yml").read_text())
    targets = {t for job in prometheus["scrape_configs"] for c in job["static_configs"] for t in c["targets"]}
    parser = swarm_cli.build_parser()
    for name, s in svc.items():  # every peer serves metrics where Prometheus looks, and evaluates
        if name.startswith("peer-"):
            args = parser.parse_args(s["command"])
            assert (args.metrics_port, args.metrics_host) == (9100, "0.0.0.0") and f"{name}:9100" in targets, name
            assert config_from(args).eval.every > 0, name
    exported = exported_metric_names()
    board = json.loads((ROOT / "deploy" / "grafana" / "dashboards" / "swarm.json").read_text())
    exprs = [t["expr"] for panel in board["panels"] for t in panel["targets"]]
    used = {m for expr in exprs for m in re.findall(r"\bswarm_[a-z_]+", expr)}
    assert len(board["panels"]) >= 10 and all(re.findall(r"\bswarm_[a-z_]+", e) for e in exprs)
    assert used <= exported, used - exported  # a renamed metric would leave a panel empty
    assert {"swarm_accuracy", "swarm_groups_credited_total", "swarm_groups_rejected_total"} <= used
    datasource = yaml.safe_load((ROOT / "deploy" / "grafana" / "provisioning" / "datasources" /
                                 "prometheus.yml").read_text())["datasources"][0]
    assert {p["datasource"]["uid"] for p in board["panels"]} == {datasource["uid"]}


def config_from(args):
    from node.config import config_from_args

    return config_from_args(args, swarm_cli.JOIN_DEFAULTS)
