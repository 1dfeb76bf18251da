"""Checking the addresses a user gives (`--initial-peers`, an address file, `--announce`) before a node starts.

A malformed address used to reach the p2p daemon, which failed to start and was retried with back-off for ever
(issue 26). Here each one is parsed as a multiaddr first (hivemind's own parser, through node/swarm/dht.py),
and a mistake is said in one line that names it and the form expected; an address that is well formed but
unreachable is left to the connection's retries, as before.
"""
from __future__ import annotations

import ipaddress
import re

from node.errors import ConfigError

HOSTS = ("ip4", "ip6", "dns", "dns4", "dns6")  # what an address's first part may be
PEER_FORM = "/ip4/HOST/tcp/PORT/p2p/PEER_ID"  # (what `swarm bootstrap` prints as its address)
_HOST_PORT = re.compile(r"^\[?(?P<host>[0-9A-Za-z.\-:]+?)\]?:(?P<port>\d{1,5})$")


def _suggestion(text: str, needs_peer_id: bool) -> str:
    """For `host:port` (the likeliest mistake), the multiaddr the user probably meant; else ''."""
    match = _HOST_PORT.match(text.strip())
    if not match:
        return ""
    host, port = match["host"], match["port"]
    try:
        kind = f"ip{ipaddress.ip_address(host).version}"
    except ValueError:  # a name, not a literal address
        kind = "dns4"
    return f"/{kind}/{host}/tcp/{port}" + ("/p2p/<peer id>" if needs_peer_id else "")


def address_problem(text: str, *, needs_peer_id: bool) -> str | None:
    """What is wrong with one address, in a phrase (None when it is a usable multiaddr). `needs_peer_id`: it
    names a node to dial (it must end in /p2p/<peer id>); otherwise it is one of our own announced addresses."""
    from node.swarm.dht import multiaddr_protocols  # (dht.py: the one module that imports hivemind)

    expected = PEER_FORM if needs_peer_id else "/ip4/HOST/tcp/PORT"
    if not text.startswith("/"):
        meant = _suggestion(text, needs_peer_id)
        if meant:
            return f"is host:port, not a multiaddr: did you mean {meant}?" + (
                " (a bootstrap prints its full addresses when it starts)" if needs_peer_id else "")
        return f"is not a multiaddr (it must begin with /): expected {expected}"
    try:
        names = multiaddr_protocols(text)
    except ValueError as err:  # one of its parts: its message says which and why
        reason = str(err).split(f"{text!r}", 1)[-1].strip(" :")
        if "p2p" in reason and "multihash" in reason:
            reason = "its /p2p/ part is not a peer id (peer ids look like Qm... or 12D3KooW...)"
        return f"is not a valid multiaddr: {reason}; expected {expected}"
    if not names:
        return f"is empty: expected {expected}"
    if names[0] not in HOSTS:
        return f"begins with /{names[0]}, not a host (/ip4, /ip6, /dns4, ...): expected {expected}"
    if "tcp" not in names and "quic" not in names and "quic-v1" not in names:
        return f"names no port (/tcp/PORT): expected {expected}"
    if needs_peer_id and names[-1] != "p2p":
        return f"names no peer id: expected {expected} (a bootstrap prints its full addresses when it starts)"
    return None


def check_addresses(initial_peers=(), announce=(), source: str = "--initial-peers") -> None:
    """Raises ConfigError, naming the first malformed address and what was expected, for addresses to dial
    (`initial_peers`, read from `source`) and our own announced ones (`announce`)."""
    for flag, addresses, needs_peer_id in ((source, initial_peers, True), ("--announce", announce, False)):
        for text in addresses:
            problem = address_problem(text, needs_peer_id=needs_peer_id)
            if problem:
                raise ConfigError(f"{flag} {text!r} {problem}")


def control_address_problem(text: str) -> str | None:
    """What is wrong with a control API address (`swarm status HOST:PORT`), in a phrase; None when usable."""
    match = _HOST_PORT.match(text.strip())
    if match:
        port = int(match["port"])
        return None if 1 <= port <= 65535 else f"has port {port}: ports are 1-65535"
    if text.startswith("/"):
        return "is a multiaddr: the control API takes HOST:PORT (the control port the node printed)"
    return ("names no port: expected HOST:PORT, e.g. 127.0.0.1:PORT with the control port the node printed "
            "(`swarm join --control-port`)")
