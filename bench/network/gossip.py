"""What gossip costs a peer as the swarm grows, on the wire: the exchange (small signed announcements in 64
sharded DHT keys, bundles pulled peer to peer) against the retired single-key exchange (every peer's bundle under
one DHT key, every peer fetching that key each step), both measured in the same run.

Network namespaces on a bridge (10.77.X.1 this host; X and the names are this run's own, so that two runs at once
stay apart): the reader (10.77.X.2) and the bootstrap (10.77.X.3, a real
`swarm bootstrap`) each in their own, so their interface counters give their real wire bytes, p2pd included.
The exchange: N publishers (SwarmDHT + GroupExchange, the production publish path, in a few helper processes on
this host) each serve and announce a fresh bundle of valid groups (zoo tokenizer, arith-add prompts,
64-token completions) every period, two real `swarm join` peers train among them, and the reader runs the
production GroupExchange (prefetch, then gather) once per period. Per N: bytes the reader downloads and uploads
per step, what it pulled, the largest DHT value (all announcements in one shard key), pull success and latency
(median, p95), and the bootstrap's CPU time and bytes per peer. The single-key exchange: as before (N SwarmDHT
publishers in one process, one fetch of each of the two keys per step).

Needs root (network namespaces); cleans up its namespaces and processes on any exit, SIGTERM included.

    .venv/bin/python -m bench.network.gossip [--peers 5,10,20,50,100] [--legacy-peers 5,10,20,50] [--steps 12]
        [--silent-dht K] [--silent-peers K]   # DHT servers / publishers that freeze before the reader starts
"""
from __future__ import annotations

import argparse
import ipaddress
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.network.subnets import host_networks, in_use

ROOT = Path(__file__).resolve().parents[2]

RUN_ENV = "SGB_RUN"  # this run's tag, which its helper processes inherit: names and subnet of its own
RUN = os.environ.get(RUN_ENV) or f"{os.getpid() % 0x10000:04x}"
SUBNET = f"10.77.{int(RUN, 16) % 250 + 1}"
BRIDGE, HOST_IP = f"sgb{RUN}", f"{SUBNET}.1"
READER = (f"sgb-reader-{RUN}", f"sgr{RUN}", f"{SUBNET}.2")  # namespace, interface prefix, address
BOOT = (f"sgb-boot-{RUN}", f"sgs{RUN}", f"{SUBNET}.3")
NS, NS_IF, NS_IP = READER[0], READER[1] + "-n", READER[2]
SWARM = "gossip-bench"
SETTLE = 6  # periods the publishers run before the reader joins (the same with or without silent servers)


def helper_env() -> dict[str, str]:
    """The environment of this bench's helper processes (this file run as a script): unbuffered, and the
    repository on the path, so that they import the bench package as the driver does."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": path}


# ---- the namespaces -----------------------------------------------------------------------------------------
def sh(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True)


def make_namespace() -> None:
    """A bridge on this host (HOST_IP) and two namespaces on it, the reader's and the bootstrap's: this run's
    own (another run's are left alone; a subnet already in use here is one clear error)."""
    remove_namespace()
    if in_use(ipaddress.ip_network(f"{SUBNET}.0/24"), host_networks()):
        sys.exit(f"bench.network.gossip: subnet {SUBNET}.0/24 is in use on this host; run again (another run's tag)")
    sh("ip", "link", "add", BRIDGE, "type", "bridge")
    sh("ip", "addr", "add", f"{HOST_IP}/24", "dev", BRIDGE)
    sh("ip", "link", "set", BRIDGE, "up")
    for ns, prefix, address in (READER, BOOT):
        sh("ip", "netns", "add", ns)
        sh("ip", "link", "add", prefix + "-h", "type", "veth", "peer", "name", prefix + "-n")
        sh("ip", "link", "set", prefix + "-n", "netns", ns)
        sh("ip", "link", "set", prefix + "-h", "master", BRIDGE)
        sh("ip", "link", "set", prefix + "-h", "up")
        sh("ip", "netns", "exec", ns, "ip", "addr", "add", f"{address}/24", "dev", prefix + "-n")
        sh("ip", "netns", "exec", ns, "ip", "link", "set", prefix + "-n", "up")
        sh("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")


def remove_namespace() -> None:
    for ns, prefix, _ in (READER, BOOT):
        subprocess.run(["ip", "link", "del", prefix + "-h"], capture_output=True, check=False)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)
    subprocess.run(["ip", "link", "del", BRIDGE], capture_output=True, check=False)


def ns_interface_bytes(ns: str, name: str) -> tuple[int, int]:
    out = subprocess.run(["ip", "netns", "exec", ns, "cat", "/proc/net/dev"], capture_output=True, text=True,
                         check=True).stdout
    for line in out.splitlines():
        if line.strip().startswith(name + ":"):
            fields = line.split(":", 1)[1].split()
            return int(fields[0]), int(fields[8])
    raise RuntimeError(f"no interface {name} in {ns}")


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) of a process and its children (its p2pd daemon)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        proc = int(stat.parent.name)
        if proc == pid or int(fields[1]) == pid:  # fields[1]: the parent's pid
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def interface_bytes(name: str) -> tuple[int, int]:
    """(received, sent) bytes of an interface, from /proc/net/dev of the current namespace."""
    for line in Path("/proc/net/dev").read_text().splitlines():
        if line.strip().startswith(name + ":"):
            fields = line.split(":", 1)[1].split()
            return int(fields[0]), int(fields[8])
    raise RuntimeError(f"no interface {name}")


# ---- synthetic but valid records --------------------------------------------------------------------------
def bundles(seed: int, step: int, groups: int, tokens: int) -> tuple[bytes, bytes]:
    import numpy as np

    from protocol.codec import (
        LengthSummary,
        WireCard,
        WireCompletion,
        WireGroup,
        encode_group,
        encode_summary,
        pack_bundle,
    )

    rng = np.random.default_rng([seed, step])
    card = WireCard("qwen2", 494_000_000, False, "bench", 151_665, "transformers", 1.0, 1.0, "bench")
    records, sums = [], []
    for _ in range(groups):
        comps = [WireCompletion(rng.integers(0, 151_665, tokens).tolist(), (-rng.exponential(1, tokens)).tolist(),
                                "length") for _completion in range(8)]
        records.append(encode_group(WireGroup("arith", "1", "train", int(rng.integers(2**31)), [1, 2, 3], comps, card,
                                              step=step, created=time.time())))
        sums.append(encode_summary(LengthSummary(8, tokens, float(tokens), float(tokens), 8 * tokens, 0.1, "qwen2",
                                                 step)))
    return pack_bundle(records, 3 << 20)[0], pack_bundle(sums, 1 << 18)[0]


# ---- the two roles ----------------------------------------------------------------------------------------
def legacy_dht(settings):
    """A DHT node that stores bundles under one key per kind, as the retired single-key exchange did (the
    project's nodes now refuse such records: their schema admits only small announcements)."""
    import asyncio

    from node.swarm.dht import SwarmDHT, live_values, record_key

    class LegacyDHT(SwarmDHT):
        max_value_bytes = 3 << 20
        dht_copying: dict = {}  # hivemind's defaults, as the single-key exchange ran

        def _validators(self) -> list:
            return [self.validator]

        def fetch_async(self, kind: str):
            """Every other node's value under the kind's one key, as the single-key exchange read it."""
            async def fetch():
                found = await self._node.get(record_key(SWARM, kind), latest=True)
                return live_values(found.value, self.own_subkey) if found is not None else {}

            return asyncio.run_coroutine_threadsafe(fetch(), self._loop)

    return LegacyDHT(settings)


def publish(n: int, period: float, groups: int, tokens: int) -> int:
    """N publishers in this process; prints the first one's address, then publishes until killed."""
    from node.config import SwarmConfig

    nodes = [legacy_dht(SwarmConfig(name=SWARM, host=HOST_IP))]
    first = [m for m in nodes[0].visible_maddrs() if HOST_IP in m][0]
    print(first, flush=True)
    nodes += [legacy_dht(SwarmConfig(name=SWARM, host=HOST_IP, initial_peers=(first,))) for _ in range(n - 1)]
    print("ready", flush=True)
    step = 0
    while True:
        started = time.monotonic()
        for i, node in enumerate(nodes):
            groups_bundle, summaries_bundle = bundles(i, step, groups, tokens)
            node.publish_async("groups", groups_bundle, 60)
            node.publish_async("summaries", summaries_bundle, 60)
        step += 1
        time.sleep(max(period - (time.monotonic() - started), 0.05))


def read(initial: str, steps: int, period: float, n: int) -> int:
    """The reader (inside the namespace): one fetch of each kind per step, as the exchange does; one JSON line
    per step."""
    from node.config import SwarmConfig

    dht = legacy_dht(SwarmConfig(name=SWARM, host=NS_IP, initial_peers=(initial,)))
    seen: set[bytes] = set()
    try:
        for step in range(steps + 2):  # two warm-up steps
            before = interface_bytes(NS_IF)
            started = time.monotonic()
            futures = {kind: dht.fetch_async(kind) for kind in ("groups", "summaries")}
            found = {kind: future.result(30) for kind, future in futures.items()}
            latency = time.monotonic() - started
            values = [v for records in found.values() for v, _ in records.values()]
            new = [v for v in values if hash(v) not in seen]
            seen.update(hash(v) for v in values)
            time.sleep(0.3)  # late replies land in this step's counters
            after = interface_bytes(NS_IF)
            print(json.dumps({"step": step, "rx": after[0] - before[0], "tx": after[1] - before[1],
                              "payload": sum(map(len, values)), "new": sum(map(len, new)),
                              "largest": sum(len(v) for v, _ in found["groups"].values()),
                              "complete": len(found["groups"]) == n, "latency": latency}), flush=True)
            time.sleep(max(period - (time.monotonic() - started), 0.05))
    finally:
        dht.shutdown()
    return 0


# ---- the exchange: announcements and pulls -----------------------------------------------------------
def valid_groups(v, rng, items: list, tokens: int):
    """Valid, informative groups of 8 completions of `tokens` tokens for `items` (arith-add items the publisher
    drew through its exchange: GroupExchange.draw_items, since receivers refuse groups of items a sender did
    not draw), what any receiver with our tokenizer accepts and learns from: half a right answer behind '='
    padding the verifier ignores, then EOS (finish "stop", rewarded), half a wrong answer, then digits, cut at
    `tokens` (finish "length", not rewarded). (Right answers followed by digits scored 0 under the reader's verifier:
    every group was uninformative, and "groups / step" counted the two real trainers' groups only.)"""
    from node.generation.rollouts import Completion, Group

    digits = v.ids("0123456789")
    out = []
    for item in items:
        comps = []
        for j in range(8):
            if j % 2:
                ids = v.ids("=" * max(tokens - len(v.ids(item.answer)) - 1, 0) + item.answer)[-(tokens - 1):]
                ids, finish = ids + [v.eos_id], "stop"
            else:
                ids = (v.ids(str(int(item.answer) + 1)) + rng.choice(digits, tokens).tolist())[:tokens]
                finish = "length"
            comps.append(Completion(ids, [-0.5] * len(ids), finish, reward=float(j % 2)))
        out.append(Group(item, v.prompt(item.ref.index), comps))
    return out


def exchange_for(settings, v, tokens: int):
    from node.swarm.dht import SwarmDHT
    from node.swarm.exchange import GroupExchange

    dht = SwarmDHT(settings)
    return dht, GroupExchange(dht, settings, v.tokenizer, v.card, {v.eos_id}, v.task, max_new_tokens=tokens)


def dht_nodes(initial: str, n: int) -> int:
    """n plain DHT servers (as a bootstrap is) joined to the swarm; prints "ready", then idles until killed (the
    driver freezes this process: its nodes keep their connections and stop answering)."""
    from node.config import SwarmConfig
    from node.swarm.dht import SwarmDHT

    nodes = [SwarmDHT(SwarmConfig(name=SWARM, host=HOST_IP, initial_peers=(initial,)), bundles=False)
             for _ in range(n)]
    print("ready", flush=True)
    try:
        while True:
            time.sleep(3600)
    finally:
        for node in nodes:
            node.shutdown()


def new_publish(initial: str, n: int, seed: int, period: float, groups: int, tokens: int,
                gossip: bool = True) -> int:
    """n publishers (the production publish path) in this process; prints "ready", then publishes a fresh
    bundle from each every period until killed, and with `gossip` keeps its view as a peer does."""
    import numpy as np

    from bench.attacks import hostile
    from node.config import SwarmConfig

    v = hostile.victim_for("tiny-add", "arith-add")
    nodes = [exchange_for(SwarmConfig(name=SWARM, host=HOST_IP, initial_peers=(initial,)), v, tokens)
             for _ in range(n)]
    print("ready", flush=True)
    rng = np.random.default_rng(seed)
    step = 0
    while True:
        started = time.monotonic()
        for _, exchange in nodes:
            exchange.publish(valid_groups(v, rng, exchange.draw_items(v.task, "train", groups), tokens), [], step)
            if gossip:
                exchange.keep_view()  # peer sampling as a training peer does it (pulls no groups)
        step += 1
        time.sleep(max(period - (time.monotonic() - started), 0.05))


def new_read(initial: str, steps: int, period: float, groups: int, tokens: int, n_expected: int,
             whole_read_every: float = 30.0, gossip: bool = True) -> int:
    """The reader (inside its namespace): the production exchange, prefetch at the start of a step and gather
    after the generation time; one JSON line per step, then one with the DHT's largest value."""
    import numpy as np

    from bench.attacks import hostile
    from node.config import SwarmConfig
    from protocol import ANNOUNCE_SHARDS
    from protocol.codec import announcement_shard

    v = hostile.victim_for("tiny-add", "arith-add")
    dht, exchange = exchange_for(SwarmConfig(name=SWARM, host=NS_IP, initial_peers=(initial,),
                                             whole_read_every=whole_read_every, gossip=gossip), v, tokens)
    pulls: list[tuple[bool, float]] = []
    pull = dht.pull_async

    def timed(*args, **kwargs):
        if args[1] == "hello":  # a push: answered "not served" by design, not a pull
            return pull(*args, **kwargs)
        future, started = pull(*args, **kwargs), time.monotonic()
        future.add_done_callback(lambda f: None if f.cancelled() else pulls.append(
            (f.exception() is None, time.monotonic() - started)))
        return future

    dht.pull_async = timed
    reads: list[tuple[int, float]] = []
    fetch = dht.fetch_shards_async

    def timed_read(shards):
        future, started = fetch(shards), time.monotonic()
        future.add_done_callback(lambda f: reads.append((len(shards), time.monotonic() - started)))
        return future

    dht.fetch_shards_async = timed_read
    rng = np.random.default_rng(12345)
    warm = 0
    joined = time.monotonic()
    try:
        measured, step = 0, 0
        while measured < steps and step < steps + 40:  # warm-up: until it knows pull_peers senders, 2 steps more
            step += 1
            before, started, done, read_done = interface_bytes(NS_IF), time.monotonic(), len(pulls), len(reads)
            exchange.prefetch()
            time.sleep(period / 2)  # generating
            gather_start = time.monotonic()
            exchange.publish(valid_groups(v, rng, exchange.draw_items(v.task, "train", groups), tokens), [], step)
            result = exchange.gather(32, 64)
            swarm_seconds = time.monotonic() - gather_start
            time.sleep(max(period - (time.monotonic() - started), 0.05))
            after = interface_bytes(NS_IF)
            warm = warm if result.peers < min(exchange.cfg.pull_peers, n_expected) else warm + 1
            measured += warm > 2
            print(json.dumps({"step": step, "measured": warm > 2, "rx": after[0] - before[0],
                              "tx": after[1] - before[1], "pulled": result.bytes_in, "groups": len(result.groups),
                              "rejected": sum(result.rejected.values()), "known": result.peers,
                              "late": result.late_fetches, "swarm_s": swarm_seconds,
                              "since_join": time.monotonic() - joined, "seeded": exchange.gossip.seeded
                              if exchange.gossip is not None else 0,
                              "pulls": pulls[done:], "reads": reads[read_done:]}), flush=True)
        found = dht.fetch_shards_async(list(range(ANNOUNCE_SHARDS))).result(120)
        per_shard: dict[int, int] = {}
        for subkey, (value, _) in found.items():  # what a holder returns for the key: owner marker, value and
            shard = announcement_shard(subkey)  # its RSA signature (~350 bytes), per announcement
            per_shard[shard] = per_shard.get(shard, 0) + len(subkey) + len(value) + 350
        print(json.dumps({"largest": max(per_shard.values(), default=0), "announcements": len(found)}),
              flush=True)
    finally:
        exchange.close()
        dht.shutdown()
    return 0


def start_bootstrap(out: Path) -> tuple[subprocess.Popen, str]:
    from node.app.local_swarm import wait_for_address

    boot = subprocess.Popen(["ip", "netns", "exec", BOOT[0], sys.executable, str(ROOT / "swarm_cli.py"),
                             "bootstrap", "--host", BOOT[2], "--swarm", SWARM, "--status-every", "86400",
                             "--identity", str(out / "bootstrap.id")],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    return boot, wait_for_address(boot, 120)


def start_trainers(initial: str, out: Path, tokens: int) -> list[subprocess.Popen]:
    """Two real peers (tiny-add full and LoRA) training in the swarm, metrics in out/trainer-i.jsonl."""
    procs = []
    for i, model in enumerate(("tiny-add", "tiny-add-lora")):
        (out / f"trainer-{i}.jsonl").unlink(missing_ok=True)
        procs.append(subprocess.Popen(
            [sys.executable, str(ROOT / "swarm_cli.py"), "join", "--initial-peers", initial, "--host", HOST_IP,
             "--swarm", SWARM, "--model", model, "--task", "arith-add", "--steps", "0", "--seed", str(i),
             "--metrics", str(out / f"trainer-{i}.jsonl"), "--set", f"generation.max_new_tokens={tokens}",
             "--set", "train.prompts_per_step=8", "--log-every", "1000000"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    return procs


def stop(procs) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)  # (a frozen process handles its SIGTERM only once continued)
            proc.terminate()
    for proc in procs:
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def measure_new(n: int, args, out: Path) -> dict:
    from node.metrics import read_metrics
    from protocol import ANNOUNCE_SHARDS

    env = helper_env()
    me = [sys.executable, str(Path(__file__).resolve())]
    boot, initial = start_bootstrap(out)
    procs = [boot]
    try:
        def publishing(k: int, seed: int) -> subprocess.Popen:  # k publishers in one helper process
            return subprocess.Popen([*me, "--publish-new", str(k), "--initial", initial, "--seed", str(seed),
                                     "--groups", str(args.groups), "--tokens", str(args.tokens), "--period",
                                     str(args.period), "--publishers-gossip", args.publishers_gossip],
                                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)

        per = [n // args.processes + (i < n % args.processes) for i in range(args.processes)]
        publishers = [publishing(k, i) for i, k in enumerate(per) if k]
        procs += publishers
        trainers = start_trainers(initial, out, args.tokens) if args.trainers else []
        procs += trainers
        for proc in publishers:
            if proc.stdout.readline().strip() != "ready":
                raise RuntimeError(f"publishers of {n} did not start")
        settled = time.monotonic() + SETTLE * args.period  # the reader joins a swarm that has run a while
        if args.silent_dht:  # joined, in routing tables, then frozen
            frozen = subprocess.Popen([*me, "--dht-nodes", str(args.silent_dht), "--initial", initial],
                                      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
            procs.append(frozen)
            if frozen.stdout.readline().strip() != "ready":
                raise RuntimeError("the DHT servers to freeze did not start")
            time.sleep(2 * args.period)  # (announced to the others' routing tables)
            frozen.send_signal(signal.SIGSTOP)
        if args.silent_peers:  # publishers that announce and serve like the others, then freeze (their p2pd
            silent = publishing(args.silent_peers, 10_000)  # daemons accept streams, nothing answers)
            procs.append(silent)
            if silent.stdout.readline().strip() != "ready":
                raise RuntimeError("the peers to freeze did not start")
            time.sleep(max(settled - time.monotonic(), 3 * args.period))  # (announced, in others' views)
            silent.send_signal(signal.SIGSTOP)  # their announcements stay live in the DHT and in views
        time.sleep(max(settled - time.monotonic(), 0.0))
        boot_before, cpu_before = ns_interface_bytes(BOOT[0], BOOT[1] + "-n"), cpu_seconds(boot.pid)
        started = time.monotonic()
        reader = subprocess.run(["ip", "netns", "exec", NS, *me, "--read-new", "--peers", str(n), "--initial",
                                 initial, "--steps",
                                 str(args.steps), "--period", str(args.period), "--groups", str(args.groups),
                                 "--tokens", str(args.tokens), "--whole-read-every", str(args.whole_read_every),
                                 "--gossip", args.gossip],
                                capture_output=True, text=True, env=env,
                                timeout=1200, check=False)
        elapsed = time.monotonic() - started
        (out / f"reader-{n}.log").write_text(reader.stdout + reader.stderr)
        boot_after, cpu_after = ns_interface_bytes(BOOT[0], BOOT[1] + "-n"), cpu_seconds(boot.pid)
        lines = [json.loads(line) for line in reader.stdout.splitlines() if line.startswith("{")]
        rows = [r for r in lines if r.get("measured")]
        tail = [r for r in lines if "largest" in r]
        if not rows or not tail:
            raise RuntimeError(f"the reader measured nothing: {reader.stderr[-3000:]}")
        trained = [read_metrics(str(out / f"trainer-{i}.jsonl")) for i in range(len(trainers))]
    finally:
        stop(procs)
    med = statistics.median
    pulls = [p for r in rows for p in r["pulls"]]
    latencies = sorted(t for ok, t in pulls if ok)
    steps = [r for r in lines if "step" in r]
    first = next((r for r in steps if r["groups"] > 0), None)
    return {"peers": n, "silent": args.silent_dht, "silent_peers": args.silent_peers,
            "first_group_step": first["step"] if first else None,  # the newcomer's first step is step 1
            "first_group_s": first["since_join"] if first else None,
            "whole_reads_before": sum(k == ANNOUNCE_SHARDS for r in steps[:first["step"] if first else None]
                                      for k, _ in r["reads"]),
            "seeded": steps[-1].get("seeded", 0),
            "rx_step": med(r["rx"] for r in rows), "tx_step": med(r["tx"] for r in rows),
            "pulled_step": med(r["pulled"] for r in rows), "groups": med(r["groups"] for r in rows),
            "shards_step": med(sum(n for n, _ in r["reads"]) for r in rows),
            "rejected": sum(r["rejected"] for r in rows), "known": rows[-1]["known"],
            "largest": tail[0]["largest"], "announcements": tail[0]["announcements"],
            "pull_ok": sum(ok for ok, _ in pulls) / max(len(pulls), 1), "pulls": len(pulls),
            "latency": med(latencies) if latencies else float("nan"),
            "latency_p95": latencies[int(0.95 * (len(latencies) - 1))] if latencies else float("nan"),
            "swarm_p95": sorted(r["swarm_s"] for r in rows)[int(0.95 * (len(rows) - 1))],
            "swarm_median": med(r["swarm_s"] for r in rows), "late": sum(r["late"] for r in rows),
            "boot_cpu_ms_s": 1000 * (cpu_after - cpu_before) / elapsed,
            "boot_bytes_s": (sum(boot_after) - sum(boot_before)) / elapsed,
            "trainer_steps": [len(t) for t in trained],
            "trainer_used": [sum(r.swarm.groups_used for r in t) for t in trained],
            "trainer_rejected": [sum(sum(r.swarm.rejected.values()) for r in t) for t in trained]}


# ---- the driver -------------------------------------------------------------------------------------------
def measure(n: int, args) -> dict:
    env = helper_env()
    me = [sys.executable, str(Path(__file__).resolve())]
    publishers = subprocess.Popen([*me, "--publish", str(n), "--groups", str(args.groups), "--tokens",
                                   str(args.tokens), "--period", str(args.period)], stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, text=True, env=env)
    try:
        first = publishers.stdout.readline().strip()
        if publishers.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the {n} publishers did not start")
        out = subprocess.run(["ip", "netns", "exec", NS, *me, "--read", first, "--peers", str(n), "--steps",
                              str(args.steps), "--period", str(args.period)], capture_output=True, text=True,
                             env=env, timeout=600, check=False)
        rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")][2:]
        if not rows:
            raise RuntimeError(f"the reader measured nothing: {out.stderr[-2000:]}")
    finally:
        publishers.terminate()
        try:
            publishers.wait(60)
        except subprocess.TimeoutExpired:
            publishers.kill()
    med = statistics.median
    return {"peers": n, "rx_step": med(r["rx"] for r in rows), "payload_step": med(r["payload"] for r in rows),
            "new_step": med(r["new"] for r in rows), "largest": max(r["largest"] for r in rows),
            "complete": sum(r["complete"] for r in rows) / len(rows),
            "latency": med(r["latency"] for r in rows),
            "latency_p95": sorted(r["latency"] for r in rows)[int(0.95 * (len(rows) - 1))]}


def plot(rows: list[dict], legacy: list[dict], path: Path) -> None:
    """Download per step against the swarm's size, both layers, and the pulled payload."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    if rows:
        ax.plot([r["peers"] for r in rows], [r["rx_step"] / 1e3 for r in rows], "o-",
                label="exchange: announcements + pulls (wire)")
        ax.plot([r["peers"] for r in rows], [r["pulled_step"] / 1e3 for r in rows], "o:",
                label="exchange: payload pulled")
    if legacy:
        ax.plot([r["peers"] for r in legacy], [r["rx_step"] / 1e3 for r in legacy], "s-",
                label="single-key exchange (wire)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("peers in the swarm")
    ax.set_ylabel("KB a peer downloads per step")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peers", default="5,10,20,50,100", help="publisher counts, the exchange")
    parser.add_argument("--legacy-peers", default="5,10,20,50", help="publisher counts, the single-key exchange "
                        "('' to skip)")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--period", type=float, default=2.0, help="seconds between publishes and reads")
    parser.add_argument("--groups", type=int, default=8, help="groups of 8 completions in a bundle")
    parser.add_argument("--tokens", type=int, default=64, help="tokens in a completion")
    parser.add_argument("--processes", type=int, default=4, help="helper processes the publishers run in")
    parser.add_argument("--trainers", type=int, default=1, help="1: two real training peers join; 0: none")
    parser.add_argument("--whole-read-every", type=float, default=30.0, help="the reader's swarm.whole_read_every "
                        "(seconds; 0, the node's default: a small swarm read whole every step)")
    parser.add_argument("--gossip", choices=("on", "off"), default="on",
                        help="the reader's swarm.gossip (peer sampling; the publishers serve views either way)")
    parser.add_argument("--publishers-gossip", choices=("on", "off"), default="on",
                        help="the publishers keep views as peers do (pulls and pushes each period; no groups "
                             "pulled); off: they only serve theirs")
    parser.add_argument("--out", default="runs/bench-gossip", help="logs, identities, results (JSON) and a plot")
    parser.add_argument("--silent-dht", type=int, default=0,
                        help="DHT servers that join, then freeze (SIGSTOP: they accept connections and never "
                             "answer) before the reader starts")
    parser.add_argument("--silent-peers", type=int, default=0,
                        help="publishers that announce and keep views like the others for a few periods, then "
                             "freeze (SIGSTOP) before the reader starts: silent peers whose announcements stay "
                             "live")
    for hidden in ("--publish", "--publish-new", "--seed", "--dht-nodes"):
        parser.add_argument(hidden, type=int, help=argparse.SUPPRESS)
    parser.add_argument("--read", help=argparse.SUPPRESS)
    parser.add_argument("--read-new", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--initial", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.publish:
        return publish(args.publish, args.period, args.groups, args.tokens)
    if args.read:
        return read(args.read, args.steps, args.period, int(args.peers))
    if args.dht_nodes:
        return dht_nodes(args.initial, args.dht_nodes)
    if args.publish_new:
        return new_publish(args.initial, args.publish_new, args.seed, args.period, args.groups, args.tokens,
                           args.publishers_gossip == "on")
    if args.read_new:
        return new_read(args.initial, args.steps, args.period, args.groups, args.tokens, int(args.peers),
                        args.whole_read_every, args.gossip == "on")
    if os.geteuid() != 0:
        parser.error("needs root: the reader and the bootstrap run in their own network namespaces")
    os.environ[RUN_ENV] = RUN  # the helper processes use this run's names
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))  # cleanup runs (finally:)
    from node.system.runtime import quiet_libraries

    quiet_libraries()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    make_namespace()
    try:
        rows, legacy = [], []
        for n in (int(x) for x in args.peers.split(",") if x):
            print(f"exchange: measuring {n} publishers ...", file=sys.stderr, flush=True)
            rows.append(measure_new(n, args, out))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
        for n in (int(x) for x in args.legacy_peers.split(",") if x):
            print(f"single-key exchange: measuring {n} publishers ...", file=sys.stderr, flush=True)
            legacy.append(measure(n, args))
    finally:
        remove_namespace()
    (out / "results.json").write_text(json.dumps({"exchange": rows, "single_key": legacy}, indent=1))
    plot(rows, legacy, out / "gossip.png")
    print(f"exchange (announcements + pulls): bundles of {args.groups} groups x 8 x {args.tokens} tokens, one per "
          f"publisher per {args.period:g} s, + {2 * args.trainers} training peers; medians over {args.steps} steps; "
          f"the reader's gossip {args.gossip}, the publishers' {args.publishers_gossip}; {args.silent_dht} silent "
          f"DHT servers, {args.silent_peers} silent peers")
    print(f"{'peers':>5} {'down KB/step':>12} {'up KB/step':>10} {'pulled KB':>9} {'groups':>6} "
          f"{'largest value KB':>16} {'pulls ok':>8} {'pull ms':>7} {'p95 ms':>6} {'swarm p95 s':>11} "
          f"{'boot CPU ms/s/peer':>18} {'boot B/s/peer':>13}")
    for r in rows:
        print(f"{r['peers']:>5} {r['rx_step'] / 1e3:>12.1f} {r['tx_step'] / 1e3:>10.1f} "
              f"{r['pulled_step'] / 1e3:>9.1f} {r['groups']:>6.0f} {r['largest'] / 1e3:>16.2f} "
              f"{r['pull_ok']:>8.1%} {r['latency'] * 1e3:>7.0f} {r['latency_p95'] * 1e3:>6.0f} "
              f"{r['swarm_p95']:>11.2f} {r['boot_cpu_ms_s'] / (r['peers'] + 1 + 2 * args.trainers):>18.2f} "
              f"{r['boot_bytes_s'] / (r['peers'] + 1 + 2 * args.trainers):>13.0f}")
    for r in rows:
        print(f"  {r['peers']} peers: swarm phase median {r['swarm_median']:.2f} s, {r['late']} directory reads late; "
              f"{r['shards_step']:.0f} shards read a step, {r['announcements']} announcements "
              f"seen, {r['pulls']} pulls, "
              f"{r['rejected']} records refused; training peers: steps {r['trainer_steps']}, groups used "
              f"{r['trainer_used']}, refused {r['trainer_rejected']}")
        print(f"    newcomer (the reader): first received groups at its step {r['first_group_step']} "
              f"({r['first_group_s'] or float('nan'):.1f} s after joining), {r['whole_reads_before']} reads of the "
              f"whole directory before them, {r['seeded']} entries from the bootstrap's view")
    if legacy:
        print(f"\nsingle-key exchange (retired), same bundles; medians over {args.steps} steps")
        print(f"{'peers':>5} {'wire KB/step':>12} {'payload KB':>10} {'new KB':>7} {'wire/new':>8} "
              f"{'largest value KB':>16} {'complete':>8} {'fetch ms':>8} {'p95 ms':>7}")
        for r in legacy:
            ratio = r["rx_step"] / r["new_step"] if r["new_step"] else float("inf")
            print(f"{r['peers']:>5} {r['rx_step'] / 1e3:>12.1f} {r['payload_step'] / 1e3:>10.1f} "
                  f"{r['new_step'] / 1e3:>7.1f} {ratio:>8.1f} {r['largest'] / 1e3:>16.1f} {r['complete']:>8.0%} "
                  f"{r['latency'] * 1e3:>8.0f} {r['latency_p95'] * 1e3:>7.0f}")
    if rows:
        base, top = rows[0], rows[-1]
        print(f"\ndownload per step, {top['peers']} vs {base['peers']} peers: exchange "
              f"{top['rx_step'] / base['rx_step']:.2f}x (target <= 1.5x)", end="")
        same = [r for r in legacy if r["peers"] == top["peers"]]
        lbase = [r for r in legacy if r["peers"] == base["peers"]]
        if same and lbase:
            print(f"; single-key {same[0]['rx_step'] / lbase[0]['rx_step']:.2f}x", end="")
        print()
        print(f"pull success, all N: {min(r['pull_ok'] for r in rows):.1%} at worst (target >= 99%); largest DHT "
              f"value {max(r['largest'] for r in rows) / 1024:.1f} KiB (target <= 64 KiB)")
        for r in rows:
            match = [x for x in legacy if x["peers"] == r["peers"]]
            if match:
                print(f"  {r['peers']} peers: exchange downloads {r['rx_step'] / match[0]['rx_step']:.2f}x the "
                      f"single-key exchange's bytes per step")
    return 0


if __name__ == "__main__":
    sys.exit(main())
