"""The control API over real gRPC on loopback, with the standard health service."""
import grpc
import pytest

from node.metrics import Totals
from node.swarm.control import ControlServer, NodeStatus, query_health, query_status


def test_status_and_health_round_trip():
    status = NodeStatus(peer_id="12D3Koo", role="peer", model="tiny-add", step=7, group_size=12, reward=0.5,
                        lam=1.25, peers=3, totals=Totals(published=40, used=30, rejected={"logprob": 2},
                                                         distrusted=1, demoted=3))
    server = ControlServer(lambda: status)
    try:
        address = f"127.0.0.1:{server.port}"
        reply = query_status(address)
        assert (reply.step, reply.group_size, reply.peers, reply.model) == (7, 12, 3, "tiny-add")
        assert getattr(reply, "lambda") == 1.25 and dict(reply.rejected) == {"logprob": 2}
        assert reply.uptime >= 0 and (reply.distrusted, reply.demoted) == (1, 3)
        assert query_health(address) == "SERVING"
        status.step = 8  # the server reads live state
        assert query_status(address).step == 8
        server.set_serving(False)
        assert query_health(address) == "NOT_SERVING"
    finally:
        server.stop()


def test_a_dead_address_is_an_rpc_error():
    with pytest.raises(grpc.RpcError):
        query_status("127.0.0.1:9", timeout=1.0)


def test_swarm_status_names_distrusted_and_demoted_senders(capsys):
    import swarm_cli

    status = NodeStatus(peer_id="12D3Koo", role="peer", model="tiny-add", step=7,
                        totals=Totals(distrusted=2, demoted=1))
    server = ControlServer(lambda: status)
    try:
        assert swarm_cli.main(["status", f"127.0.0.1:{server.port}"]) == 0
        assert "senders distrusted for good 2 (false log-probs), demoted 1" in capsys.readouterr().out
        status.totals.distrusted = status.totals.demoted = 0  # nothing to say: no line
        assert swarm_cli.main(["status", f"127.0.0.1:{server.port}"]) == 0
        assert "distrusted" not in capsys.readouterr().out
    finally:
        server.stop()
