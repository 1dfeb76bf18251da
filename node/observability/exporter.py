"""A Prometheus endpoint for a training peer (`--metrics-port`): what a volunteer's dashboard scrapes.

Gauges hold the last step's figures (reward, held-out accuracy where evaluated, G, lambda, straggler rate,
filtered fraction, step time, peers); counters are the node's running totals (node/metrics.py `Totals`, the
object the end summary and `swarm status` read), read at each scrape: steps, groups sent, received, trained on,
rejected by reason, senders distrusted and demoted, bytes in and out. Every name starts with `swarm_`; the
peer's model and swarm are labels of `swarm_peer_info`. The HTTP server is http.py's (bounded connections,
each with a time limit; prometheus-client's own gave each connection a thread with none), at /metrics.
"""
from __future__ import annotations

from node.metrics import REJECTION_REASONS, StepResult, Totals

COUNTERS = (  # (name, help, the Totals field it reads)
    ("steps", "training steps done by this process", "steps"),
    ("groups_sent", "own groups published", "published"),
    ("groups_received", "received groups decoded for the first time", "received"),
    ("groups_used", "received groups trained on", "used"),
    ("groups_duplicate", "a sender's own earlier groups received again (a restarted peer): not refused", "duplicates"),
    ("senders_distrusted", "senders distrusted for good (their claimed log-probs)", "distrusted"),
    ("senders_demoted", "senders demoted (their groups pulled against our own)", "demoted"),
    ("groups_credited", "our groups other peers say they trained on (their announcements)", "credited"),
    ("bytes_in", "received bytes", "bytes_in"),
    ("bytes_out", "published bytes", "bytes_out"),
)


class TotalsCollector:
    """The running totals as Prometheus counters, read when scraped."""

    def __init__(self, totals: Totals):
        self.totals = totals

    def collect(self):
        from prometheus_client.core import CounterMetricFamily

        for name, doc, key in COUNTERS:
            yield CounterMetricFamily(f"swarm_{name}", doc, value=getattr(self.totals, key))
        rejected = CounterMetricFamily("swarm_groups_rejected", "received records rejected", labels=("reason",))
        counts = {**dict.fromkeys(REJECTION_REASONS, 0), **self.totals.rejected}  # every reason, 0 until it happens
        for reason, count in sorted(counts.items()):
            rejected.add_metric((reason,), count)
        yield rejected
        refused = CounterMetricFamily("swarm_streams_refused", "streams other peers opened to our pull handler "
                                      "that it refused", labels=("reason",))
        for reason, count in sorted(self.totals.streams_refused.items()):
            refused.add_metric((reason,), count)
        yield refused


class MetricsExporter:
    def __init__(self, port: int, host: str = "127.0.0.1", model: str = "", swarm: str = ""):
        """Serves on host:port (0: any free port; `self.port` is the one bound). A taken port is PortInUse."""
        from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Gauge, Info, generate_latest

        from node.system.process import ensure_port_free

        from .http import HttpServer

        ensure_port_free(host, port, "--metrics-port")
        self.registry = registry = CollectorRegistry()

        def gauge(name, doc, labels=()):
            return Gauge(f"swarm_{name}", doc, labels, registry=registry)

        Info("swarm_peer", "this peer", registry=registry).info({"model": model, "swarm": swarm})
        self.reward = gauge("reward", "mean sampled reward of the last step's own completions")
        self.accuracy = gauge("accuracy", "held-out pass@1 at the last evaluation", ("split", "kind"))
        self.group_size = gauge("group_size", "group size G of the last step")
        self.lam = gauge("lambda", "SAGC's dual variable after the last step")
        self.straggler = gauge("straggler_rate", "share of the last step's own groups that straggled")
        self.filtered = gauge("filtered_fraction", "share of the last step's rows the F- filter zeroed")
        self.step_seconds = gauge("step_seconds", "wall time of the last step (evaluation not included)")
        self.peers = gauge("peers", "other peers seen at the last step's poll")
        self.view = gauge("view_peers", "peers in the peer-sampling view after the last step")
        self.alignment = gauge("alignment", "mean cosine of the last step's senders' head gradients with our own's")
        scrape = lambda: (CONTENT_TYPE_LATEST, generate_latest(registry))  # noqa: E731
        self.server = HttpServer({"/metrics": scrape, "/": scrape}, host, port, "metrics")
        self.port = self.server.port
        self.url = f"http://{host}:{self.port}/metrics"

    def watch(self, totals: Totals) -> None:
        """Serves these running totals as the counters (once; the node feeds them each step)."""
        self.registry.register(TotalsCollector(totals))

    def update(self, r: StepResult) -> None:
        """The gauges: the last step's figures."""
        self.reward.set(r.reward)
        for key, value in {**r.eval_before, **r.eval}.items():  # "train/greedy" -> split train, kind greedy
            split, _, kind = key.partition("/")
            self.accuracy.labels(split, kind).set(value)
        self.group_size.set(r.group_size)
        self.lam.set(r.group.lam)
        self.straggler.set(r.group.straggler_rate)
        self.filtered.set(r.loss.filtered_frac)
        self.step_seconds.set(r.step_seconds)
        self.peers.set(r.swarm.peers)
        self.view.set(r.swarm.view)
        self.alignment.set(r.swarm.alignment)

    def close(self) -> None:
        self.server.close()
