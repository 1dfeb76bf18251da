"""A Prometheus endpoint for a training peer (`--metrics-port`): what a volunteer's dashboard scrapes.

Gauges hold the last step's figures (reward, held-out accuracy where evaluated, G, lambda, straggler rate,
filtered fraction, step time, peers); counters add up what crossed the network (groups sent, received, trained
on, rejected by reason; bytes in and out). Every name starts with `swarm_`; the peer's model and swarm are
labels of `swarm_peer_info`. The HTTP server runs in a daemon thread (prometheus-client's own).
"""
from __future__ import annotations

from .metrics import StepResult


class MetricsExporter:
    def __init__(self, port: int, host: str = "127.0.0.1", model: str = "", swarm: str = ""):
        """Serves on host:port (0: any free port; `self.port` is the one bound). A taken port is PortInUse."""
        from prometheus_client import CollectorRegistry, Counter, Gauge, Info, start_http_server

        from .process import ensure_port_free

        ensure_port_free(host, port, "--metrics-port")
        self.registry = registry = CollectorRegistry()

        def gauge(name, doc, labels=()):
            return Gauge(f"swarm_{name}", doc, labels, registry=registry)

        def counter(name, doc, labels=()):
            return Counter(f"swarm_{name}", doc, labels, registry=registry)

        Info("swarm_peer", "this peer", registry=registry).info({"model": model, "swarm": swarm})
        self.steps = counter("steps", "training steps done by this process")
        self.reward = gauge("reward", "mean sampled reward of the last step's own completions")
        self.accuracy = gauge("accuracy", "held-out pass@1 at the last evaluation", ("split", "kind"))
        self.group_size = gauge("group_size", "group size G of the last step")
        self.lam = gauge("lambda", "SAGC's dual variable after the last step")
        self.straggler = gauge("straggler_rate", "share of the last step's own groups that straggled")
        self.filtered = gauge("filtered_fraction", "share of the last step's rows the F- filter zeroed")
        self.step_seconds = gauge("step_seconds", "wall time of the last step (evaluation not included)")
        self.peers = gauge("peers", "other peers seen at the last step's poll")
        self.sent = counter("groups_sent", "own groups published")
        self.received = counter("groups_received", "received groups decoded for the first time")
        self.used = counter("groups_used", "received groups trained on")
        self.rejected = counter("groups_rejected", "received records rejected", ("reason",))
        self.distrusted = counter("senders_distrusted", "senders distrusted for good (their claimed log-probs)")
        self.demoted = counter("senders_demoted", "senders demoted (their groups pulled against our own)")
        self.alignment = gauge("alignment", "mean cosine of the last step's senders' head gradients with our own's")
        self.bytes_in = counter("bytes_in", "received bytes")
        self.bytes_out = counter("bytes_out", "published bytes")
        self.server, self.thread = start_http_server(port, addr=host, registry=registry)
        self.port = self.server.server_port

    def update(self, r: StepResult) -> None:
        self.steps.inc()
        self.reward.set(r.reward)
        for key, value in r.eval.items():  # "train/greedy" -> split train, kind greedy
            split, _, kind = key.partition("/")
            self.accuracy.labels(split, kind).set(value)
        self.group_size.set(r.group_size)
        self.lam.set(r.group.lam)
        self.straggler.set(r.group.straggler_rate)
        self.filtered.set(r.loss.filtered_frac)
        self.step_seconds.set(r.step_seconds)
        s = r.swarm
        self.peers.set(s.peers)
        self.sent.inc(s.published)
        self.received.inc(s.groups_received)
        self.used.inc(s.groups_used)
        for reason, count in s.rejected.items():
            self.rejected.labels(reason).inc(count)
        self.distrusted.inc(s.distrusted)
        self.demoted.inc(s.demoted)
        self.alignment.set(s.alignment)
        self.bytes_in.inc(s.bytes_in)
        self.bytes_out.inc(s.bytes_out)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
