"""Subnets for network namespaces that this host's own interfaces leave free.

A run killed before its teardown leaves its namespace and its veth's address behind; a second interface on the
same subnet takes the routes from the new one, and nothing reaches it. Benches and tests that build namespaces
take their subnet from here instead of trusting a fixed one."""
from __future__ import annotations

import ipaddress
import subprocess


def host_networks() -> list[ipaddress.IPv4Network]:
    """The IPv4 networks this host's interfaces are on now (`ip -o -4 addr show`)."""
    out = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True, check=True).stdout
    return [ipaddress.ip_interface(fields[3]).network for fields in map(str.split, out.splitlines())
            if len(fields) > 3]


def in_use(net: ipaddress.IPv4Network, taken: list[ipaddress.IPv4Network]) -> bool:
    return any(net.overlaps(other) for other in taken)


def free_subnet(prefix: str, start: int, taken: list[ipaddress.IPv4Network] | None = None) -> ipaddress.IPv4Network:
    """The first `prefix`.X.0/24 (prefix: two octets, "10.79") that none of `taken` (default: this host's
    networks) overlaps, trying X = start % 250 + 1 onward, wrapping within 1-250. ValueError when all are taken."""
    taken = host_networks() if taken is None else taken
    for i in range(250):
        net = ipaddress.ip_network(f"{prefix}.{(start + i) % 250 + 1}.0/24")
        if not in_use(net, taken):
            return net
    raise ValueError(f"no free {prefix}.X.0/24 subnet on this host")
