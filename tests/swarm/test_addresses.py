"""The addresses a user gives are checked before a node starts: each mistake named in one phrase (issue 26)."""
import pytest

from node.errors import ConfigError
from node.swarm.addresses import address_problem, check_addresses

PEER = "QmXoypizjW3WknFiJnKLwHCnL72vedxjQkDDP1mXWo6uco"


@pytest.mark.parametrize("text", [
    f"/ip4/127.0.0.1/tcp/31330/p2p/{PEER}",
    f"/ip6/::1/tcp/31330/p2p/{PEER}",
    f"/dns4/boot.example.org/tcp/31330/p2p/{PEER}",
    f"/ip4/1.2.3.4/udp/4001/quic/p2p/{PEER}",
    "/ip4/1.2.3.4/tcp/1/p2p/12D3KooWD3eckifWpRn9wQpMG9R9hX3sD158z7EqHWmweQAJU5SA",
])
def test_well_formed_peer_addresses_pass(text):
    assert address_problem(text, needs_peer_id=True) is None


@pytest.mark.parametrize("text, problem", [
    ("garbage", "is not a multiaddr (it must begin with /): expected /ip4/HOST/tcp/PORT/p2p/PEER_ID"),
    ("", "is not a multiaddr (it must begin with /): expected /ip4/HOST/tcp/PORT/p2p/PEER_ID"),
    ("/", "is empty: expected /ip4/HOST/tcp/PORT/p2p/PEER_ID"),
    ("127.0.0.1:31330", "is host:port, not a multiaddr: did you mean /ip4/127.0.0.1/tcp/31330/p2p/<peer id>? "
                        "(a bootstrap prints its full addresses when it starts)"),
    ("boot.example.org:31330", "is host:port, not a multiaddr: did you mean "
                               "/dns4/boot.example.org/tcp/31330/p2p/<peer id>? (a bootstrap prints its full "
                               "addresses when it starts)"),
    ("[::1]:31330", "is host:port, not a multiaddr: did you mean /ip6/::1/tcp/31330/p2p/<peer id>? (a bootstrap "
                    "prints its full addresses when it starts)"),
    ("/ip4/127.0.0.1/tcp/9/p2p/QmNotAPeerId", "is not a valid multiaddr: its /p2p/ part is not a peer id (peer ids "
                                              "look like Qm... or 12D3KooW...); expected "
                                              "/ip4/HOST/tcp/PORT/p2p/PEER_ID"),
    (f"/ip4/300.0.0.1/tcp/1/p2p/{PEER}", "is not a valid multiaddr: protocol ip4: base address '300.0.0.1' is not "
                                         "IPv4; expected /ip4/HOST/tcp/PORT/p2p/PEER_ID"),
    (f"/tcp/1/p2p/{PEER}", "begins with /tcp, not a host (/ip4, /ip6, /dns4, ...): expected "
                           "/ip4/HOST/tcp/PORT/p2p/PEER_ID"),
    (f"/ip4/1.2.3.4/p2p/{PEER}", "names no port (/tcp/PORT): expected /ip4/HOST/tcp/PORT/p2p/PEER_ID"),
    ("/ip4/1.2.3.4/tcp/31330", "names no peer id: expected /ip4/HOST/tcp/PORT/p2p/PEER_ID (a bootstrap prints its "
                               "full addresses when it starts)"),
])
def test_each_mistake_is_named(text, problem):
    assert address_problem(text, needs_peer_id=True) == problem


def test_announced_addresses_need_no_peer_id():
    assert address_problem("/ip4/203.0.113.7/tcp/31330", needs_peer_id=False) is None
    assert address_problem("203.0.113.7:31330", needs_peer_id=False) == \
        "is host:port, not a multiaddr: did you mean /ip4/203.0.113.7/tcp/31330?"


def test_check_names_the_flag_and_the_first_bad_address():
    good = f"/ip4/127.0.0.1/tcp/31330/p2p/{PEER}"
    check_addresses((good,), ("/ip4/127.0.0.1/tcp/1",))  # nothing raised
    with pytest.raises(ConfigError, match=r"^--initial-peers 'x:1' is host:port"):
        check_addresses((good, "x:1", "garbage"))
    with pytest.raises(ConfigError, match=r"^--announce 'nope' is not a multiaddr"):
        check_addresses((good,), ("nope",))
    with pytest.raises(ConfigError, match=r"^--initial-peers-file a.txt: 'nope' is not"):
        check_addresses(("nope",), source="--initial-peers-file a.txt:")
