"""Peers that cannot accept inbound connections (behind NAT or a firewall), in a network namespace whose
interface drops every inbound connection attempt (iptables; this kernel has no netem): they run in client mode,
pull like anyone, and others pull their bundles through relays, reachable peers the NAT'd peer connected to,
which pass the pull on over that connection and cannot alter what they relay (the owner signs it)."""
import ipaddress
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

import pytest

from bench.network.subnets import free_subnet
from node.app.local_swarm import SwarmProcesses
from node.config import SwarmConfig
from node.swarm.dht import SwarmDHT
from protocol.codec import RecordError

ROOT = Path(__file__).resolve().parents[2]
SWARM = "nat-test"
BUNDLE = bytes(range(256)) * 1600  # 400 KB: two chunks


def sh(*args: str, check: bool = True) -> None:
    subprocess.run(args, check=check, capture_output=True)


class Nat(NamedTuple):
    """The namespace's name and the two ends of its veth pair."""
    ns: str
    host_ip: str
    nat_ip: str


def test_a_namespace_subnet_skips_one_a_leftover_interface_is_on():
    taken = [ipaddress.ip_network("10.79.8.0/24"), ipaddress.ip_network("10.79.9.0/25"),
             ipaddress.ip_network("192.168.1.0/24")]
    assert free_subnet("10.79", 7, taken) == ipaddress.ip_network("10.79.10.0/24")  # X = 8 and 9 are taken
    assert free_subnet("10.79", 249, taken) == ipaddress.ip_network("10.79.250.0/24")
    assert free_subnet("10.79", 250, taken) == ipaddress.ip_network("10.79.1.0/24")  # wraps within 1-250
    with pytest.raises(ValueError, match="no free"):
        free_subnet("10.79", 0, [ipaddress.ip_network("10.79.0.0/16")])


@pytest.fixture
def nat_namespace():
    """A namespace joined to this host by a veth pair (host_ip <-> nat_ip), dropping inbound TCP connection
    attempts and new inbound UDP flows: outbound connections work, nobody can dial in. Yields a Nat."""
    if os.geteuid() != 0 or not all(shutil.which(tool) for tool in ("ip", "iptables")):
        pytest.skip("needs root with ip and iptables (network namespaces)")
    ns, host_if, ns_if = f"swnat{os.getpid()}", f"swn{os.getpid() % 100000}h", f"swn{os.getpid() % 100000}n"
    net = free_subnet("10.79", os.getpid())  # a run killed before its teardown may hold one
    host_ip, nat_ip = str(net.network_address + 1), str(net.network_address + 2)
    try:
        sh("ip", "netns", "add", ns)
        sh("ip", "link", "add", host_if, "type", "veth", "peer", "name", ns_if)
        sh("ip", "link", "set", ns_if, "netns", ns)
        sh("ip", "addr", "add", f"{host_ip}/24", "dev", host_if)
        sh("ip", "link", "set", host_if, "up")
        for cmd in (("ip", "addr", "add", f"{nat_ip}/24", "dev", ns_if), ("ip", "link", "set", ns_if, "up"),
                    ("ip", "link", "set", "lo", "up"),
                    ("iptables", "-A", "INPUT", "-i", ns_if, "-p", "tcp", "--syn", "-j", "DROP")):
            sh("ip", "netns", "exec", ns, *cmd)
        # p2pd listens on TCP only here; new UDP flows are dropped too where conntrack is available
        sh("ip", "netns", "exec", ns, "iptables", "-A", "INPUT", "-i", ns_if, "-p", "udp", "-m", "conntrack",
           "--ctstate", "NEW", "-j", "DROP", check=False)
        yield Nat(ns, host_ip, nat_ip)
    finally:
        sh("ip", "link", "del", host_if, check=False)
        sh("ip", "netns", "del", ns, check=False)


def nat_side(initial: str, relay: str, nat_ip: str) -> None:
    """Inside the namespace: a client-mode node serves BUNDLE, pulls once from `relay` (so it holds a connection
    to it), prints its peer id and subkey, then waits to be killed."""
    node = SwarmDHT(SwarmConfig(name=SWARM, host=nat_ip, initial_peers=(initial,), client_mode=True))
    node.serve("groups", BUNDLE)
    pulled = node.pull_async(relay, "groups", b"", 1 << 20, timeout=60).result(70)
    print(json.dumps({"peer": node.peer_id, "subkey": node.own_subkey.hex(), "pulled": len(pulled)}), flush=True)
    time.sleep(600)


def relayed_pull(receiver: SwarmDHT, owner: str, signer: bytes, relay: SwarmDHT, tries: int = 3) -> bytes:
    """The owner's bundle pulled through `relay`, tried again (at most `tries` times, as a peer's exchange does
    at its next step) when the relay cut it for its owner's pace: on a loaded machine the NAT'd process may miss
    RELAY_CHUNK between its two chunks. Any other failure is raised at once."""
    for attempt in range(tries):
        try:
            return receiver.pull_async(owner, "groups", b"", 1 << 20, timeout=60, signer=signer,
                                       via=relay.peer_id).result(70)
        except ConnectionError:
            if attempt == tries - 1 or not relay.intake.refused["relay-slow"]:
                raise
    raise AssertionError("unreachable")


def test_a_peer_nobody_can_dial_is_pulled_through_a_relay_that_cannot_alter_its_bundle(nat_namespace):
    host_ip = nat_namespace.host_ip
    boot = SwarmDHT(SwarmConfig(name=SWARM, host=host_ip), bundles=False)  # as `swarm bootstrap`: DHT only
    initial = next(m for m in boot.visible_maddrs() if f"/{host_ip}/" in m)
    relay = SwarmDHT(SwarmConfig(name=SWARM, host=host_ip, initial_peers=(initial,)))
    relay.serve("groups", b"relay's own")
    natted = subprocess.Popen(["ip", "netns", "exec", nat_namespace.ns, sys.executable, "-m", "tests.swarm.test_nat",
                               initial, relay.peer_id, nat_namespace.nat_ip], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True, cwd=ROOT)  # (ROOT: bench importable)
    receiver = None
    try:
        line = natted.stdout.readline()
        assert line, "the NAT'd node did not start"
        nat = json.loads(line)
        assert nat["pulled"] == len(b"relay's own")  # it reaches out
        receiver = SwarmDHT(SwarmConfig(name=SWARM, host=host_ip, initial_peers=(initial,)))  # joins after
        signer = bytes.fromhex(nat["subkey"])
        with pytest.raises(Exception) as direct:  # nobody can dial it
            receiver.pull_async(nat["peer"], "groups", b"", 1 << 20, timeout=20).result(30)
        assert not isinstance(direct.value, RecordError)
        relayed = relayed_pull(receiver, nat["peer"], signer, relay)
        assert relayed == BUNDLE, relay.intake.refused
        with pytest.raises(RecordError) as forged:  # the relay's word is not enough: the owner must sign it
            receiver.pull_async(nat["peer"], "groups", b"", 1 << 20, timeout=60, signer=relay.own_subkey,
                                via=relay.peer_id).result(70)
        assert forged.value.reason == "signature"
        with pytest.raises(Exception) as bootstrap:  # connected to it, but a bootstrap relays nothing
            receiver.pull_async(nat["peer"], "groups", b"", 1 << 20, timeout=60, signer=signer,
                                via=boot.peer_id).result(70)
        assert not isinstance(bootstrap.value, RecordError)
        own = receiver.pull_async(relay.peer_id, "groups", b"", 1 << 20, timeout=30, signer=relay.own_subkey)
        assert own.result(40) == b"relay's own"  # and its own bundle, signed
    finally:
        natted.kill()
        natted.wait()
        for node in (receiver, relay, boot):
            if node is not None:
                node.shutdown()


LIGHT = ["--task", "arith-add", "--steps", "0", "--set", "train.prompts_per_step=4",
         "--set", "swarm.received_groups=4", "--set", "train.group_policy=fixed", "--set", "train.group_size=4"]


def test_a_natted_swarm_join_contributes_and_receives(nat_namespace, tmp_path, wait_steps):
    """Real processes: bootstrap and one peer on this host, a `swarm join --client-mode` in the namespace; each
    trains on the other's groups."""
    sp = SwarmProcesses(tmp_path)
    try:
        sp.start_bootstrap("--host", nat_namespace.host_ip)
        sp.start_peer("open", "--model", "tiny-add", "--host", nat_namespace.host_ip, "--seed", "0", *LIGHT)
        sp.start_peer("natted", "--model", "tiny-add-lora", "--host", nat_namespace.nat_ip, "--client-mode",
                      "--seed", "1", *LIGHT, wrap=("ip", "netns", "exec", nat_namespace.ns))
        deadline = time.monotonic() + 300
        received = {}
        while time.monotonic() < deadline:
            received = {name: sum(r.swarm.groups_used for r in wait_steps(sp, name, 1, 300)) for name in sp.peers}
            if all(n >= 8 for n in received.values()):
                break
            time.sleep(1)
        assert all(n >= 8 for n in received.values()), (received, sp.log_tail("natted"), sp.log_tail("open"))
        for name in sp.peers:
            assert all(not r.swarm.rejected for r in sp.metrics(name)), sp.log_tail(name)
    finally:
        sp.stop()


if __name__ == "__main__":
    nat_side(sys.argv[1], sys.argv[2], sys.argv[3])
