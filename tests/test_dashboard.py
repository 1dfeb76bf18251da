"""The web dashboard: what it serves (pure and in process), then a real swarm (a bootstrap and two peers as
processes) seen through a real headless browser (Debian's chromium), as a volunteer would open it; in the same
swarm, a peer that dies and comes back from its checkpoint, as the survivor sees it."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from node.models.saved import checkpoints
from node.observability.dashboard import Dashboard, finite
from node.swarm.control import NodeStatus

ROOT = Path(__file__).resolve().parents[1]
CLI = [sys.executable, str(ROOT / "swarm_cli.py")]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def get(port: int, path: str) -> tuple[int, str, bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as reply:
            return reply.status, reply.headers["Content-Type"], reply.read()
    except urllib.error.HTTPError as err:
        return err.code, err.headers["Content-Type"], err.read()


def test_the_dashboard_serves_its_page_and_the_nodes_status_as_json():
    status = NodeStatus(role="peer", model="digit-add", peer_id="QmMe", step=7, reward=float("nan"))
    status.totals.rejected = {"drawn": 2}
    status.curves = lambda: {"accuracy": [[0, 0.25, None]]}  # (RunLog.curves in a node)
    board = Dashboard(status.snapshot)
    try:
        code, kind, page = get(board.port, "/")
        assert code == 200 and kind.startswith("text/html") and b"/api/status" in page
        assert b"innerHTML" not in page and b"<script src" not in page  # peers' text only as text; self-contained
        code, kind, body = get(board.port, "/api/status")
        snap = json.loads(body)  # strict JSON: NaN went out as null
        assert code == 200 and kind == "application/json" and snap["reward"] is None
        assert (snap["peer_id"], snap["model"], snap["step"]) == ("QmMe", "digit-add", 7)
        assert snap["rejected"]["drawn"] == 2 and snap["rejected"]["signature"] == 0
        assert snap["curves"] == {"accuracy": [[0, 0.25, None]]}
        assert get(board.port, "/../etc/passwd")[0] == 404 and get(board.port, "/metrics")[0] == 404
    finally:
        board.close()
    assert finite({"a": [float("inf"), 1.0], "b": (float("nan"),)}) == {"a": [None, 1.0], "b": [None]}


def browse(url: str, *extra: str) -> str:
    """The page as a real browser renders it after its script ran (its DOM), or a screenshot (extra)."""
    out = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=4000",
                          *extra, *(() if extra else ("--dump-dom",)), url],
                         capture_output=True, text=True, timeout=180, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def read_json(port: int) -> dict:
    try:
        return json.loads(get(port, "/api/status")[2])
    except OSError:
        return {}


@pytest.mark.skipif(CHROMIUM is None, reason="needs a headless browser: apt-get install chromium (.ci/run does)")
def test_a_real_swarm_through_a_real_browser(tmp_path):
    from test_cli_network import free_port

    boot_port, boot_board, peer_board, b_board = free_port(), free_port(), free_port(), free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    address = tmp_path / "boot.addr"
    with open(tmp_path / "boot.log", "w") as boot_log:  # (the child keeps its own copy of the file)
        boot = subprocess.Popen([*CLI, "bootstrap", "--port", str(boot_port), "--identity",
                                 str(tmp_path / "boot.id"), "--status-every", "1", "--address-file", str(address),
                                 "--dashboard-port", str(boot_board)], stdout=boot_log, stderr=subprocess.STDOUT,
                                cwd=ROOT)
    def join(name, model, *extra, board=None, log_mode="w"):
        with open(tmp_path / f"{name}.log", log_mode) as log:
            return subprocess.Popen(
                [*CLI, "join", "--initial-peers-file", str(address), "--model", model, "--task", "arith",
                 "--prompts", "4", "--control-port", "-1", "--identity", str(tmp_path / f"{name}.id"),
                 "--eval-every", "2", "--set", "eval.prompts=8", "--startup-timeout", "60", "--log-every", "1",
                 "--out", str(tmp_path / f"{name}-out"), "--checkpoint-every", "4", "--checkpoint-minutes", "0",
                 "--seed", str(ord(name)), "--metrics", str(tmp_path / f"{name}.jsonl"),
                 *(["--dashboard-port", str(board)] if board else []), *extra],
                stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env=env)

    # b trains on its own groups only (it still shares them): resumed from a checkpoint, it regenerates exactly
    # the groups it published after it, whatever a sent meanwhile
    peers = [join("a", "tiny-add", board=peer_board),
             join("b", "tiny-sub", "--set", "swarm.received_groups=0", board=b_board)]
    try:
        deadline, snap, b_snap = time.monotonic() + 300, {}, {}
        while time.monotonic() < deadline:  # until a's dashboard shows b, b's groups used and two evaluations,
            time.sleep(1)  #                  and b's shows the rows a signed receipts for
            assert all(p.poll() is None for p in [boot, *peers]), (tmp_path / "a.log").read_text()[-3000:]
            snap, b_snap = read_json(peer_board), read_json(b_board)
            if (snap.get("peer_list") and snap["peer_list"][0].get("used")
                    and len(snap.get("curves", {}).get("accuracy", [])) >= 2
                    and b_snap.get("credit", {}).get("rows")):
                break
        assert snap["peer_list"][0]["used"] > 0 and snap["groups_in"] > 0, snap
        # issue 55, 7: b's credit, from a's signed receipts, on b's dashboard and checked offline by anyone
        credit, receipts = b_snap["credit"], tmp_path / "b-out" / "receipts.jsonl"
        assert credit["rows"] > 0 and credit["receivers"] == 1 and credit["file"] == str(receipts), b_snap
        b_dom = browse(f"http://127.0.0.1:{b_board}/")
        shown = re.search(r"(\d+) rows in (\d+) of our groups, trained on by 1 peer,", b_dom)  # (more by now)
        assert shown and int(shown.group(1)) >= credit["rows"] and int(shown.group(2)) >= credit["groups"], b_dom
        assert f"swarm credit verify {receipts}" in b_dom
        checked = subprocess.run([*CLI, "credit", "verify", str(receipts)], capture_output=True, text=True,
                                 timeout=120, cwd=ROOT, check=False)
        assert checked.returncode == 0 and " receipts verified, 0 not" in checked.stderr, checked.stderr
        shot = tmp_path / "credit.png"
        browse(f"http://127.0.0.1:{b_board}/", "--window-size=800,1100", f"--screenshot={shot}")
        assert shot.read_bytes()[:4] == b"\x89PNG"
        if os.environ.get("SWARM_CREDIT_SHOT"):  # (how docs/credit.png was made)
            shutil.copy(shot, os.environ["SWARM_CREDIT_SHOT"])
        dom = browse(f"http://127.0.0.1:{peer_board}/")
        assert "swarm-node peer: tiny-add" in dom and '<div id="error"></div>' in dom, dom[-4000:]
        assert "<td>tiny-sub</td>" in dom  # the other peer, by the model name it announces
        assert dom.count('class="curve"') == 3  # sampled reward, held-out ID and OOD accuracy
        deadline = time.monotonic() + 120  # the bootstrap reads the directory in rotation (8 shards a round of
        while time.monotonic() < deadline:  # 2 s while its view fills): both peers listed within one rotation
            if {"tiny-add", "tiny-sub"} <= {p.get("model") for p in read_json(boot_board).get("peer_list", [])}:
                break
            time.sleep(1)
        boot_dom = browse(f"http://127.0.0.1:{boot_board}/")
        assert "swarm-node bootstrap" in boot_dom and "<td>tiny-add</td>" in boot_dom and "<td>tiny-sub</td>" in \
            boot_dom

        # b dies (kill -9) once it has three checkpoints: a stops counting it at its next failed pull and says
        # alone within a few steps
        deadline = time.monotonic() + 300
        while len(checkpoints(tmp_path / "b-out")) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        peers[1].send_signal(signal.SIGKILL)
        peers[1].wait(timeout=60)
        died_at, seen = read_json(peer_board)["step"], len((tmp_path / "a.log").read_text())

        def since_death() -> str:  # a may have said "alone:" already, before it first found b
            return (tmp_path / "a.log").read_text()[seen:]

        deadline = time.monotonic() + 300
        while "alone:" not in since_death() and time.monotonic() < deadline:
            time.sleep(1)
        assert read_json(peer_board)["peers"] == 0 and "alone:" in since_death()
        assert read_json(peer_board)["step"] - died_at <= 20  # (5 steps of patience, a pull's back-off and its
        #                         failure's time, which is seconds, not steps: 13-16 steps in three runs here)
        # b comes back from its oldest checkpoint (8 or more steps back: a pulled some of the bundles b
        # published after it, whatever the two peers' pace) and trains the steps after it again, on items it
        # draws anew (node/swarm/draws.py): a trains on them, refusing none of b's groups
        for newer in checkpoints(tmp_path / "b-out")[:-1]:
            shutil.rmtree(newer)
        peers[1] = join("b", "tiny-sub", "--set", "swarm.received_groups=0", log_mode="a", board=b_board)
        deadline, snap = time.monotonic() + 300, {}
        while time.monotonic() < deadline and "rejoined:" not in since_death():
            time.sleep(1)
            assert peers[1].poll() is None, (tmp_path / "b.log").read_text()[-3000:]
        snap = read_json(peer_board)
        assert "resuming from" in (tmp_path / "b.log").read_text()
        assert "rejoined:" in since_death() and snap["rejected"]["drawn"] == 0, snap
        assert "rejected a record" not in since_death()  # no refusal at all, no WARN line
    finally:
        for p in [*peers, boot]:
            p.send_signal(signal.SIGTERM)
        codes = [p.wait(timeout=60) for p in [*peers, boot]]
        # every process stops cleanly on SIGTERM (a, b, the bootstrap); on a failure, which one and how each ended
        assert codes == [0, 0, 0], (codes, *((tmp_path / f"{n}.log").read_text()[-1500:] for n in ("a", "b", "boot")))


@pytest.mark.skipif(CHROMIUM is None, reason="needs a headless browser: apt-get install chromium (.ci/run does)")
def test_what_a_peer_claims_is_shown_as_text_never_as_html():
    status = NodeStatus(role="bootstrap", peer_id="QmMe")
    status.peer_list = [{"peer_id": "QmOther", "family": "qwen2", "params": 1000, "lora": False, "step": 3,
                         "age": 1.0, "established": False, "failures": 0, "model": '<img src=x onerror="1">x<b>y</b>',
                         "accuracy": 2.0, "used": 0, "credited": 0}]
    board = Dashboard(status.snapshot)
    try:
        dom = browse(f"http://127.0.0.1:{board.port}/")
    finally:
        board.close()
    assert "&lt;img src=x onerror=\"1\"&gt;x&lt;b&gt;y&lt;/b&gt;" in dom and "<img" not in dom and "<b>y" not in dom


def test_a_thousand_idle_connections_cost_no_thread_and_the_page_still_answers(monkeypatch):
    """Issue 54, 5: 300 connections that sent `GET / HT` and stopped held 311 threads and 312 descriptors (a
    thread per connection, no time limit). Now they cost no thread, at most MAX_CONNECTIONS descriptors (the
    oldest closed as new ones come), each closes after IDLE_SECONDS, and the page answers meanwhile."""
    import resource
    import socket
    import threading

    from node.observability import http

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 4096:  # (the test's own 1000 client sockets)
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(4096, hard), hard))
    monkeypatch.setattr(http, "IDLE_SECONDS", 2.0)
    status = NodeStatus(role="peer", model="tiny-add", peer_id="QmIdle")
    board = Dashboard(status.snapshot)
    threads_before = threading.active_count()
    held = []
    try:
        for _ in range(1000):
            s = socket.create_connection(("127.0.0.1", board.port), timeout=10)
            s.sendall(b"GET / HT")
            held.append(s)
        code, _, body = get(board.port, "/api/status")  # a viewer, while the strangers hold what they can
        assert code == 200 and json.loads(body)["peer_id"] == "QmIdle"
        assert board.server.connections <= http.MAX_CONNECTIONS and board.server.evicted >= 1000 - 64
        assert threading.active_count() <= threads_before + 1  # (no thread a connection)
        deadline = time.monotonic() + 30
        while board.server.connections and time.monotonic() < deadline:  # the last ones time out by themselves
            time.sleep(0.2)
        assert board.server.connections == 0
        assert all(s.recv(1) == b"" for s in held[-8:])  # closed by the server, nothing answered
    finally:
        for s in held:
            s.close()
        board.close()
