"""Local gRPC control API: `swarm status` asks a running node; the same server answers grpc.health.v1.

Docker health checks and orchestrators use the standard health service; people use `swarm status`.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass, field

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from node.errors import PortInUse
from node.metrics import REJECTION_REASONS, Totals
from node.system.process import ensure_port_free
from protocol import control_pb2, control_pb2_grpc

MAX_LISTED = 64  # peers listed in a status reply at most


def peer_info(announcement, age: float, established: bool = False, failures: int = 0, used: int = 0,
              credited: int = 0, tokens: int = 0, capped_share: float = 0.0, mean_weight: float = 0.0,
              receipted_rows: int = 0) -> dict:
    """A PeerInfo's fields from another peer's announcement (protocol.codec.Announcement); `age`: seconds since
    we read it (our clock: a peer's own stamp is its claim); `used`: its groups we trained on; `credited`: ours
    it says it trained on; `tokens`: its tokens we trained on, `capped_share` and `mean_weight` theirs
    (node/swarm/senders.py SenderState); `receipted_rows`: our rows its signed receipts name (receipts.py)."""
    card = announcement.card
    return {"peer_id": announcement.peer_id, "family": card.family, "params": card.n_params, "lora": card.lora,
            "step": announcement.step, "age": max(age, 0.0), "established": established, "failures": failures,
            "model": announcement.model, "accuracy": announcement.accuracy, "used": used, "credited": credited,
            "tokens": tokens, "capped_share": capped_share, "mean_weight": mean_weight,
            "task": announcement.task.describe() if announcement.task else "", "receipted_rows": receipted_rows}


def shown(info: dict) -> dict:
    """A PeerInfo dict with the text a peer chose (its id as it claims it, model, family) made safe to show."""
    from .display import safe_text

    return {**info, **{k: safe_text(info[k], 64) for k in ("peer_id", "model", "family", "task") if k in info}}


@dataclass
class NodeStatus:
    """What a node reports; the node's loop updates it, the server reads it."""

    peer_id: str = ""
    role: str = "peer"
    maddrs: list[str] = field(default_factory=list)
    model: str = ""
    step: int = 0
    group_size: int = 0
    reward: float = 0.0
    lam: float = 0.0
    peers: int = 0
    totals: Totals = field(default_factory=Totals)  # the node's running totals (node/metrics.py), read when asked
    groups_per_minute: float = 0.0
    accuracy: dict[str, float] = field(default_factory=dict)  # latest held-out pass@1 (node/evaluation.py)
    accuracy_step: int = 0
    peer_list: list[dict] = field(default_factory=list)  # control_pb2.PeerInfo fields, the latest read first
    started: float = field(default_factory=time.monotonic)
    curves: Callable[[], dict] | None = None  # the dashboard's curves, read when asked (RunLog.curves)
    task: str = ""  # the task it trains on (a peer), or the swarm's as most announcements say (a bootstrap)
    credit: dict = field(default_factory=dict)  # control_pb2.Credit fields: signed receipts naming us (a peer)

    def snapshot(self) -> dict:
        """What the dashboard shows (node/observability/dashboard.py): the status reply's fields, as JSON
        numbers and text, and this node's curves."""
        t = self.totals
        return {"peer_id": self.peer_id, "role": self.role, "maddrs": list(self.maddrs), "model": self.model,
                "step": self.step, "group_size": self.group_size, "reward": self.reward, "lambda": self.lam,
                "peers": self.peers, "groups_out": t.published, "groups_in": t.used, "groups_received": t.received,
                "rejected": {**dict.fromkeys(REJECTION_REASONS, 0), **t.rejected}, "duplicates": t.duplicates,
                "uptime": time.monotonic() - self.started, "groups_per_minute": self.groups_per_minute,
                "accuracy": dict(self.accuracy), "accuracy_step": self.accuracy_step,
                "peer_list": [shown(p) for p in self.peer_list[:MAX_LISTED]], "distrusted": t.distrusted,
                "demoted": t.demoted, "credited": t.credited, "credited_by": t.credited_by,
                "task": self.task, "credit": dict(self.credit),
                "curves": self.curves() if self.curves is not None else {}}

    def to_reply(self) -> control_pb2.StatusReply:
        return control_pb2.StatusReply(
            peer_id=self.peer_id, role=self.role, maddrs=self.maddrs, model=self.model, step=self.step,
            group_size=self.group_size, reward=self.reward, peers=self.peers, groups_out=self.totals.published,
            groups_in=self.totals.used, rejected=self.totals.rejected, uptime=time.monotonic() - self.started,
            groups_per_minute=self.groups_per_minute, accuracy=self.accuracy, accuracy_step=self.accuracy_step,
            peer_list=[control_pb2.PeerInfo(**p) for p in self.peer_list[:MAX_LISTED]],
            distrusted=self.totals.distrusted, demoted=self.totals.demoted, credited=self.totals.credited,
            credited_by=self.totals.credited_by, task=self.task,
            credit=control_pb2.Credit(**self.credit) if self.credit else None, **{"lambda": self.lam})


class _Control(control_pb2_grpc.ControlServicer):
    def __init__(self, status: Callable[[], NodeStatus]):
        self.status = status

    def Status(self, request, context):
        return self.status().to_reply()


class ControlServer:
    """Serves Control and grpc.health.v1 on host:port (port 0: any free port, see `.port`).

    SO_REUSEPORT is off: a taken port is an error (PortInUse), never a second server on it that might answer
    the first one's `status` / `--health` calls."""

    def __init__(self, status: Callable[[], NodeStatus], host: str = "127.0.0.1", port: int = 0,
                 serving: bool = True):
        """serving: the health check's first answer (a node that is still starting says NOT_SERVING)."""
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2), options=[("grpc.so_reuseport", 0)])
        control_pb2_grpc.add_ControlServicer_to_server(_Control(status), self.server)
        self.health = health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        ensure_port_free(host, port, "control API")
        try:
            self.port = self.server.add_insecure_port(f"{host}:{port}")
        except RuntimeError:  # grpc's failed bind
            self.port = 0
        if self.port == 0:
            raise PortInUse(f"control API port {port} on {host} could not be bound (in use?)")
        self.server.start()
        self.set_serving(serving)

    def set_serving(self, serving: bool) -> None:
        state = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
        self.health.set("", state)

    def stop(self) -> None:
        self.set_serving(False)
        self.server.stop(grace=1).wait(5)


def query_status(address: str, timeout: float = 5.0) -> control_pb2.StatusReply:
    with grpc.insecure_channel(address) as channel:
        return control_pb2_grpc.ControlStub(channel).Status(control_pb2.StatusRequest(), timeout=timeout)


def query_health(address: str, timeout: float = 5.0) -> str:
    with grpc.insecure_channel(address) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""),
                                                           timeout=timeout)
    return health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
