"""Bounded intake of the pull handler (node/swarm/intake.py, issue 23 points 1, 2, 5-7): a request is refused by
size at its header, by time when it stalls, by count and rate per stranger; then the same through real hivemind
nodes on loopback, where a stream announcing 16 GiB must cost the victim no memory and honest pulls go on."""
import asyncio
import contextlib
import os
import time

import pytest

from node.config import SwarmConfig
from node.swarm import dht as dht_module
from node.swarm import relay as relay_module
from node.swarm import streams as streams_module
from node.swarm.dht import SwarmDHT, bundle_handler
from node.swarm.intake import IntakeRefused, Pacer, StreamLimits, frame, parse_request, read_request
from node.system.process import rss_mb
from protocol import PROTOCOL_VERSION
from protocol import swarm_pb2 as pb
from protocol.codec import BundleAssembler, RecordError, bundle_chunks, pack_bundle


def fed(data: bytes, eof: bool = True) -> asyncio.StreamReader:
    reader = asyncio.StreamReader()
    reader.feed_data(data)
    if eof:
        reader.feed_eof()
    return reader


def refusal(data: bytes, eof: bool = True, max_bytes: int = 64, timeout: float = 0.2) -> tuple[str, int]:
    """The reason a request is refused for, and how many bytes the reader had left unread."""
    async def go():
        reader = fed(data, eof)
        with pytest.raises(IntakeRefused) as err:
            await read_request(reader, max_bytes, timeout)
        return err.value.reason, len(reader._buffer)
    return asyncio.run(go())


def test_a_request_is_read_under_its_limits():
    request = pb.BundleRequest(version=PROTOCOL_VERSION, kind="groups", digest=b"d" * 16).SerializeToString()
    assert asyncio.run(read_request(fed(frame(request) + b"trailing"), 64, 1.0)) == request

    async def with_end_mark():  # what hivemind's callers send: the request, then an empty error message
        reader = fed(frame(request) + b"\x01" + bytes(8), eof=False)
        got = await read_request(reader, 64, 1.0)
        return got, len(reader._buffer)
    assert asyncio.run(with_end_mark()) == (request, 0)  # both read: closing our side cuts nothing short
    huge = b"\x00" + (16 << 30).to_bytes(8, "big") + b"x" * 1000  # 16 GiB announced
    assert refusal(huge) == ("size", 1000)  # refused at the header: nothing of the body was read
    assert refusal(b"\x00\x00\x00")[0] == "frame"  # the stream ended inside the header
    assert refusal(b"\x00\x00\x00", eof=False)[0] == "time"  # and one that stops sending is dropped
    assert refusal(frame(b"ok")[:-1], eof=False)[0] == "time"  # the body too
    assert refusal(b"\x01" + frame(b"error")[1:])[0] == "frame"  # not a message


def test_a_request_names_only_what_a_pull_can_name():
    def request(**fields) -> bytes:
        return pb.BundleRequest(**{"version": PROTOCOL_VERSION, "kind": "groups", **fields}).SerializeToString()

    owner = "QmNNwC7J513fsLNqpsWkFAeFVxe9oWrCZWvciWam8T6BhA"
    for ok in (request(), request(digest=b"d" * 16), request(kind="summaries", owner=owner), request(version=99)):
        assert parse_request(ok).SerializeToString() == ok  # (another version is answered "not served")
    for bad in (request(kind="weights"), request(digest=b"d" * 15), request(owner="../../etc"),
                request(owner="Qm" + "z" * 200), request(owner="Qm0OIl"), b"\xff\xff\xff"):
        with pytest.raises(IntakeRefused) as err:
            parse_request(bad)
        assert err.value.reason == "request"


def test_streams_are_bounded_per_peer_in_all_and_in_rate():
    now = [0.0]
    limits = StreamLimits(per_peer=2, total=3, rate=1.0, burst=3.0, peers=2, clock=lambda: now[0])
    limits.admit("a")
    limits.admit("a")
    with pytest.raises(IntakeRefused, match="streams"):
        limits.admit("a")  # a third open stream of one peer
    limits.admit("b")
    with pytest.raises(IntakeRefused, match="streams"):
        limits.admit("c")  # a fourth in all
    assert limits.open_streams() == 3 and limits.open_streams("a") == 2
    limits.release("a")
    limits.release("a")
    limits.admit("a")  # its third request: the bucket (3 deep) is now empty
    limits.release("a")
    with pytest.raises(IntakeRefused, match="rate"):
        limits.admit("a")
    now[0] = 1.0  # a second later: one more request
    limits.admit("a")
    limits.release("a")
    assert limits.refused == {"streams": 2, "rate": 1}
    limits.release("b")
    for i in range(10):  # a crowd of identities: at most `peers` remembered when idle
        limits.admit(f"x{i}")
        limits.release(f"x{i}")
    assert len(limits._buckets) <= 2 and limits.open_streams() == 0
    limits.release("nobody")  # releasing what was never admitted changes nothing
    assert limits.open_streams() == 0


def test_our_requests_to_one_peer_are_paced_under_what_its_intake_admits():
    now = [0.0]
    pacer = Pacer(rate=2.0, burst=3.0, peers=2, clock=lambda: now[0])
    assert [pacer.delay("a") for _ in range(5)] == [0.0, 0.0, 0.0, 0.5, 1.0]  # a burst, then 1/rate apart
    assert pacer.delay("b") == 0.0  # each peer has its own
    now[0] = 10.0  # long after: the burst is back, no more
    assert [pacer.delay("a") for _ in range(4)] == [0.0, 0.0, 0.0, 0.5]
    pacer.delay("c")  # a third peer: the least recently used ("b") is forgotten
    assert list(pacer._buckets) == ["a", "c"]
    now[0] = 20.0  # a bound on the wait (a relay's): what would wait longer is not booked at all
    assert [pacer.delay("a", most=0.6) for _ in range(6)] == [0.0, 0.0, 0.0, 0.5, None, None]
    now[0] = 20.5  # a slot (1/rate) later the next one waits 0.5, as the fourth did
    assert pacer.delay("a", most=0.6) == 0.5 and pacer.delay("a", most=0.6) is None
    # a peer stepping every 0.15 s with 4 requests a step (27 a second) to one partner, for a minute: paced with
    # the defaults, every request is admitted by the partner's default limits; unpaced, some were refused
    def refused(paced: bool) -> dict:
        clock = [0.0]
        pacer, limits = Pacer(clock=lambda: clock[0]), StreamLimits(clock=lambda: clock[0])
        sends = []
        for i in range(1600):
            clock[0] = i * 0.15 / 4
            sends.append(clock[0] + (pacer.delay("p") if paced else 0.0))
        for t in sorted(sends):
            clock[0] = t
            with contextlib.suppress(IntakeRefused):
                limits.admit("p")
                limits.release("p")
        return limits.refused

    assert refused(paced=True) == {} and refused(paced=False)["rate"] > 100


def test_an_empty_chunk_is_refused_by_the_receiver():
    bundle = b"x" * 100
    first = bundle_chunks(bundle)[0]
    empty = pb.BundleChunk(version=PROTOCOL_VERSION, total=first.total, digest=first.digest)
    assembler = BundleAssembler(b"", 1000)
    with pytest.raises(RecordError) as err:
        assembler.add(empty)
    assert err.value.reason == "malformed"


def test_a_sender_of_endless_empty_chunks_costs_a_puller_one_refusal():
    """Issue 23, 5, through real nodes: a signed first chunk, then empty chunks for as long as the reader reads
    (bench/attacks/hostile.py EmptyChunkDHT); the pull is refused at the first empty one, at once."""
    from bench.attacks.hostile import EmptyChunkDHT
    from protocol.codec import WireCard

    card = WireCard("qwen2", 1, False, "fp", 99, "transformers", 1.0, 1.0, "0.1.0")
    owner = EmptyChunkDHT(SwarmConfig(name="t"), card=card)
    puller = SwarmDHT(SwarmConfig(name="t", initial_peers=tuple(owner.visible_maddrs())), bundles=False)
    try:
        digest = owner.serve("groups", pack_bundle([b"x" * 300_000], 1 << 20)[0])  # two chunks' worth
        start = time.monotonic()
        with pytest.raises(RecordError) as err:
            puller.pull_async(owner.peer_id, "groups", digest, 1 << 20, timeout=60,
                              maddrs=tuple(owner.visible_maddrs())).result(70)
        assert err.value.reason == "malformed" and time.monotonic() - start < 10
    finally:
        for node in (puller, owner):
            node.shutdown()


@pytest.fixture
def victim_and_stranger():
    victim = SwarmDHT(SwarmConfig(name="t"))
    stranger = SwarmDHT(SwarmConfig(name="t", initial_peers=tuple(victim.visible_maddrs())), bundles=False)
    yield victim, stranger
    for node in (stranger, victim):
        node.shutdown()


def raw_stream(stranger: SwarmDHT, victim: SwarmDHT, head: bytes, hold: float, body_mib: int = 0) -> bool:
    """Opens a bundle stream from `stranger` to `victim`, writes `head` and then `body_mib` MiB of zeros (one
    buffer, written again and again) and waits up to `hold` seconds; True when the victim closed the stream
    (end of stream, or a write refused), False when it was still open after `hold`."""
    from hivemind.p2p import PeerID

    async def go() -> bool:
        _, reader, writer = await stranger._node.p2p.call_binary_stream_handler(
            PeerID.from_base58(victim.peer_id), bundle_handler("t"))
        zeros = bytes(1 << 20)
        try:
            writer.write(head)
            for _ in range(body_mib):
                writer.write(zeros)
                await writer.drain()
            return await asyncio.wait_for(reader.read(1), hold) == b""
        except ConnectionError:
            return True
        except asyncio.TimeoutError:
            return False
        finally:
            writer.close()

    return stranger._call(go(), timeout=hold + 120)


def test_a_stranger_cannot_make_the_pull_handler_buffer_or_hold_streams(victim_and_stranger, monkeypatch):
    victim, stranger = victim_and_stranger
    monkeypatch.setattr(streams_module, "REQUEST_TIMEOUT", 1.0)
    digest = victim.serve("groups", pack_bundle([b"honest"], 1 << 20)[0])

    def honest_pull() -> bytes:
        return stranger.pull_async(victim.peer_id, "groups", digest, 1 << 20, timeout=60,
                                   maddrs=tuple(victim.visible_maddrs())).result(70)

    assert honest_pull() == pack_bundle([b"honest"], 1 << 20)[0]  # (and every lazy import done before measuring)
    before = rss_mb(os.getpid())
    # 16 GiB announced, 64 MiB sent: refused at the header, the rest never buffered by the victim
    assert raw_stream(stranger, victim, b"\x00" + (16 << 30).to_bytes(8, "big"), hold=30, body_mib=64)
    assert victim.intake.refused["size"] == 1
    assert rss_mb(os.getpid()) - before < 32
    # a request that stops after 3 bytes is dropped after REQUEST_TIMEOUT, its stream released
    assert raw_stream(stranger, victim, b"\x00\x00\x00", hold=30)
    assert victim.intake.refused["time"] == 1 and victim.intake.open_streams() == 0
    # and an honest pull from the same node still gets the bundle
    assert honest_pull() == pack_bundle([b"honest"], 1 << 20)[0]
    # (its stream is released when the handler returns, which can be just after the client has the bundle)
    for _ in range(100):
        if victim.intake.open_streams() == 0:
            break
        time.sleep(0.1)
    assert victim.intake.open_streams() == 0 and set(victim.intake.refused) == {"size", "time"}


def test_a_peer_that_pulls_as_fast_as_it_can_is_paced_and_never_refused(victim_and_stranger):
    """100 pulls back to back (a peer whose steps are short): unpaced, the victim refuses some for their rate,
    and each refusal is a failed pull (a backed-off sender); paced, every one is answered."""
    victim, stranger = victim_and_stranger
    digest = victim.serve("groups", pack_bundle([b"honest"], 1 << 20)[0])

    def pulls(n: int) -> int:
        ok = 0
        for _ in range(n):
            with contextlib.suppress(Exception):
                ok += bool(stranger.pull_async(victim.peer_id, "groups", digest, 1 << 20, timeout=60,
                                               maddrs=tuple(victim.visible_maddrs())).result(70))
        return ok

    paced = stranger.pacer
    stranger.pacer = Pacer(rate=1e9, burst=1e9)
    unpaced_ok = pulls(100)
    refused = victim.intake.refused["rate"]
    assert refused > 0 and unpaced_ok == 100 - refused
    time.sleep(StreamLimits.burst / StreamLimits.rate)  # the victim's bucket full again
    stranger.pacer = paced
    assert pulls(100) == 100 and victim.intake.refused["rate"] == refused


def test_a_relayed_pull_to_an_owner_that_never_answers_ends_and_frees_its_slot(monkeypatch):
    """An owner that accepts the relayed stream and never answers (issue 23 point 2) held a relay slot for
    ever; now each relayed pull ends within RELAY_TIMEOUT, chunks or not, one requester holds at most
    RELAY_PER_REQUESTER slots and one owner's pulls RELAY_PER_OWNER, and a relay relays only for owners that
    name it (relay_owners)."""
    import time

    monkeypatch.setattr(relay_module, "RELAY_TIMEOUT", 2.0)
    relay = SwarmDHT(SwarmConfig(name="t"))
    owner = SwarmDHT(SwarmConfig(name="t", initial_peers=tuple(relay.visible_maddrs())), bundles=False)
    requester = SwarmDHT(SwarmConfig(name="t", initial_peers=tuple(relay.visible_maddrs())), bundles=False)
    other = SwarmDHT(SwarmConfig(name="t", initial_peers=tuple(relay.visible_maddrs())), bundles=False)
    honest = SwarmDHT(SwarmConfig(name="t", initial_peers=tuple(relay.visible_maddrs()), client_mode=True))
    bundle = pack_bundle([b"honest"], 1 << 20)[0]
    honest.serve("groups", bundle)

    async def silent(stream_info, reader, writer):  # accepts, reads nothing, answers nothing
        await asyncio.sleep(3600)

    try:
        owner._call(owner._node.p2p.add_binary_stream_handler(bundle_handler("t"), silent), timeout=30)

        def pull(by=requester, of=owner):
            return by.pull_async(of.peer_id, "groups", b"", 1 << 20, timeout=60,
                                 maddrs=tuple(relay.visible_maddrs()), via=relay.peer_id)

        relay.relay_owners = {}  # a relay relays only for owners whose live announcement names it
        with pytest.raises(RecordError) as unnamed:
            pull().result(30)
        assert unnamed.value.reason == "missing" and relay.intake.refused["relay-owner"] == 1
        relay.relay_owners = {owner.peer_id: len(bundle), honest.peer_id: len(bundle)}
        start = time.monotonic()
        held = [pull(), pull()]
        time.sleep(0.5)  # both relayed pulls are in the relay now
        with pytest.raises(RecordError) as third:  # a third of the same requester is not served at once
            pull().result(30)
        assert third.value.reason == "missing" and time.monotonic() - start < 2.0
        with pytest.raises(RecordError) as same_owner:  # nor a pull of the same owner by someone else: the
            pull(by=other).result(30)                   # silent owner's pulls hold RELAY_PER_OWNER slots at most
        assert same_owner.value.reason == "missing"
        assert pull(by=other, of=honest).result(30) == bundle  # while another owner's pulls go through
        for future in held:  # the held ones end at the relay's deadline, not at the requester's 60 s
            with pytest.raises((ConnectionError, RecordError)):
                future.result(30)
        assert time.monotonic() - start < 10 and relay._relaying == {} and relay._relayed == {}
    finally:
        for node in (honest, other, requester, owner, relay):
            node.shutdown()


def test_a_relay_paces_the_pulls_it_forwards_to_one_owner_under_the_owners_intake():
    """The owner sees every pull a relay forwards as the relay's: requesters pulling one client-mode owner through
    one relay faster than the owner admits from one peer got the relay refused for its rate; the relay now paces
    them like its own pulls (0.75x the owner's rate, half its burst) and turns away what would wait longer than
    RELAY_FIRST_CHUNK. The owner's limits are scaled down here (2 a second after 6; 1.5 after 3 for the relay's
    pacer, the defaults' proportions) so that the unpaced excess does not depend on this machine's speed."""
    import threading

    relay = SwarmDHT(SwarmConfig(name="t"))
    boot = tuple(relay.visible_maddrs())
    owner = SwarmDHT(SwarmConfig(name="t", initial_peers=boot, client_mode=True))
    requesters = [SwarmDHT(SwarmConfig(name="t", initial_peers=boot), bundles=False) for _ in range(3)]
    bundle = pack_bundle([b"honest"], 1 << 20)[0]
    owner.serve("groups", bundle)
    relay.relay_owners = {owner.peer_id: len(bundle)}

    def storm(pulls_each: int) -> int:
        served = [0] * len(requesters)

        def pull_all(i: int) -> None:
            for _ in range(pulls_each):
                with contextlib.suppress(Exception):
                    served[i] += requesters[i].pull_async(owner.peer_id, "groups", b"", 1 << 20, timeout=60,
                                                          maddrs=boot, via=relay.peer_id).result(70) == bundle
        threads = [threading.Thread(target=pull_all, args=(i,)) for i in range(len(requesters))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        return sum(served)

    try:
        assert requesters[0].pull_async(owner.peer_id, "groups", b"", 1 << 20, timeout=60, maddrs=boot,
                                        via=relay.peer_id).result(70) == bundle  # the relay works
        owner.intake = StreamLimits(rate=2.0, burst=6.0)
        relay.pacer = Pacer(rate=1e9, burst=1e9)  # as before: forwarded as they came
        unpaced_served = storm(12)
        refused = owner.intake.refused["rate"]
        assert refused > 0 and unpaced_served <= 36 - refused, (unpaced_served, dict(owner.intake.refused))
        time.sleep(3.0)  # the owner's bucket full again
        relay.pacer = Pacer(rate=1.5, burst=3.0)
        paced_served = storm(12)
        assert owner.intake.refused["rate"] == refused, dict(owner.intake.refused)  # none more
        assert paced_served >= 3, (paced_served, dict(relay.intake.refused))  # the relay's burst at least
    finally:
        for node in (*requesters, owner, relay):
            node.shutdown()


def test_one_invalid_subrecord_no_longer_hides_the_rest_of_its_shard():
    """hivemind drops a whole dictionary value when one sub-record fails validation (issue 23's shard
    blackout); our node keeps the valid ones."""
    from types import SimpleNamespace

    from hivemind.dht.protocol import DHTProtocol
    from hivemind.dht.storage import DictionaryDHTValue
    from hivemind.utils.timed_storage import get_dht_time

    from node.swarm.dht import keep_valid_subrecords

    class OnlyHonest:
        def validate(self, record) -> bool:
            return DHTProtocol.serializer.loads(record.subkey) != b"ground-key"

    value = DictionaryDHTValue()
    for subkey in (b"honest-1", b"ground-key", b"honest-2"):
        value.store(subkey, b"announcement", get_dht_time() + 60)
    protocol = SimpleNamespace(record_validator=OnlyHonest(), serializer=DHTProtocol.serializer)
    assert keep_valid_subrecords(protocol, b"shard", value)
    assert sorted(k for k, _ in value.items()) == [b"honest-1", b"honest-2"]
    node = SwarmDHT(SwarmConfig(name="t"), bundles=False)
    try:  # installed on our node in place of hivemind's
        assert node._node.protocol._validate_dictionary.func is keep_valid_subrecords
    finally:
        node.shutdown()


def test_announced_addresses_are_dialled_bound_to_the_announced_peer_and_not_once_per_pull():
    from node.swarm.streams import dialable

    me = "QmAnnounced"
    assert dialable(["/ip4/10.0.0.1/tcp/80", f"/ip4/10.0.0.2/tcp/81/p2p/{me}", "/ip4/10.0.0.3/tcp/82/p2p/QmOther"],
                    me) == ["/ip4/10.0.0.1/tcp/80", "/ip4/10.0.0.2/tcp/81"]  # dialled as connect(me, addresses)
    from hivemind.p2p import PeerID

    node = SwarmDHT(SwarmConfig(name="t"), bundles=False)
    stranger = SwarmDHT(SwarmConfig(name="t"), bundles=False)  # a peer id nobody here is connected to
    absent = PeerID.from_base58(stranger.peer_id)
    stranger.shutdown()
    dials = []

    async def unreachable(peer, addresses):
        dials.append([str(a) for a in addresses])
        raise ConnectionError("no answer")

    node._node.p2p._client.connect = unreachable
    try:
        for _ in range(3):  # pulls within DIAL_AGAIN_AFTER: one dial; the others open no stream (p2pd would dial)
            with pytest.raises(ConnectionError, match="did not answer at its announced addresses"):
                node._call(node._reach(absent, ["/ip4/10.0.0.1/tcp/80"]), 30)
        assert dials == [["/ip4/10.0.0.1/tcp/80"]]
        with pytest.raises(ConnectionError):  # a new address: dialled at once, and only it
            node._call(node._reach(absent, ["/ip4/10.0.0.1/tcp/80", "/ip4/10.0.0.9/tcp/80"]), 30)
        assert dials[1:] == [["/ip4/10.0.0.9/tcp/80"]]
        node._call(node._reach(absent, []), 30)  # no address (a relay we know no address of): the daemon's way
    finally:
        node.shutdown()


def test_a_peer_is_dialled_at_its_announced_address_and_only_as_the_announced_identity():
    """A peer we are not connected to is reached at the addresses its announcement names (as our own
    visible_maddrs write them, /p2p/ part included), and an announcement naming someone else's listener draws one
    connection attempt that fails its handshake, not a connection per pull."""
    import socket
    import threading

    owner = SwarmDHT(SwarmConfig(name="t"))  # two nodes that never met: no connection, no shared bootstrap
    puller = SwarmDHT(SwarmConfig(name="t"), bundles=False)
    bundle = pack_bundle([b"honest"], 1 << 20)[0]
    digest = owner.serve("groups", bundle)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    accepted = []

    def accept():
        with contextlib.suppress(OSError):
            while True:
                accepted.append(listener.accept()[0])

    threading.Thread(target=accept, daemon=True).start()
    try:
        got = puller.pull_async(owner.peer_id, "groups", digest, 1 << 20, timeout=60,
                                maddrs=tuple(owner.visible_maddrs())).result(70)
        assert got == bundle
        stranger = SwarmDHT(SwarmConfig(name="t"), bundles=False)  # an identity nobody here is connected to
        absent = stranger.peer_id
        stranger.shutdown()
        for _ in range(5):
            with pytest.raises(Exception):  # noqa: B017 (refused or unreachable: either way no bundle)
                puller.pull_async(absent, "groups", digest, 1 << 20, timeout=10,
                                  maddrs=(f"/ip4/127.0.0.1/tcp/{listener.getsockname()[1]}",)).result(15)
        assert len(accepted) == 1  # one dial, whose handshake the listener (not that identity) cannot pass
    finally:
        listener.close()
        for conn in accepted:
            conn.close()
        for node in (puller, owner):
            node.shutdown()


def test_a_stranger_cannot_store_faster_than_the_per_peer_rate():
    """Issue 23 point 10: a DHT node's store handler answers a stranger beyond STORE_RATE / STORE_BURST
    "not stored" before decoding anything; another peer's stores go on, and the wire is unchanged (the stranger
    is a plain hivemind node calling DHTProtocol.rpc_store)."""
    from hivemind.dht.routing import DHTID
    from hivemind.p2p import PeerID

    victim = SwarmDHT(SwarmConfig(name="t"), bundles=False)
    stranger = SwarmDHT(SwarmConfig(name="t", initial_peers=tuple(victim.visible_maddrs())), bundles=False)
    other = SwarmDHT(SwarmConfig(name="t", initial_peers=tuple(victim.visible_maddrs())), bundles=False)
    key = DHTID.generate(source=b"not one of the swarm's keys")

    def stores(node, n: int) -> list:
        async def go():
            peer = PeerID.from_base58(victim.peer_id)
            return await asyncio.gather(*(node._node.protocol.call_store(
                peer, [key], [b"x"], [time.time() + 60]) for _ in range(n)))
        return node._call(go(), timeout=120)

    try:
        answers = stores(stranger, 200)
        assert all(a == [False] for a in answers)  # (not our schema: refused either way)
        limited = victim.stores.refused["rate"]
        assert 200 - dht_module.STORE_BURST - 40 <= limited < 200  # the burst and what the rate refills passed
        stores(other, 5)  # another peer is not limited by the stranger's rate
        assert victim.stores.refused["rate"] == limited
        assert victim.stores.open_streams() == 0
    finally:
        for node in (other, stranger, victim):
            node.shutdown()


def test_owners_that_send_a_chunk_and_stall_cannot_hold_a_relay(monkeypatch):
    """Issue 54, 2: owners whose first chunk is one byte and who then stall held a relayed pull for RELAY_TIMEOUT
    (30 s): 4 requesters x 2 pulls of 4 such owners kept all 8 slots and no honest pull went through. Now each
    next chunk has RELAY_CHUNK, the pace RELAY_MIN_RATE, the bytes what the owner declared and announced, and
    owners not yet proven hold RELAY_STRANGER_SLOTS at most: an owner whose bundles came whole through this
    relay is served while the stallers try, and a staller's slot is free again within RELAY_CHUNK."""
    import threading

    monkeypatch.setattr(relay_module, "RELAY_CHUNK", 1.0)
    relay = SwarmDHT(SwarmConfig(name="t"))
    boot = tuple(relay.visible_maddrs())
    honest = SwarmDHT(SwarmConfig(name="t", initial_peers=boot, client_mode=True))
    stallers = [SwarmDHT(SwarmConfig(name="t", initial_peers=boot, client_mode=True), bundles=False)
                for _ in range(4)]
    requesters = [SwarmDHT(SwarmConfig(name="t", initial_peers=boot), bundles=False) for _ in range(2)]
    probe = SwarmDHT(SwarmConfig(name="t", initial_peers=boot), bundles=False)
    bundle = pack_bundle([b"honest"], 1 << 20)[0]
    honest.serve("groups", bundle)
    first = bundle_chunks(b"x" * 1000)[0]
    first.data = b"x"  # one byte of the thousand it declares, then nothing

    async def stall(stream_info, reader, writer):
        writer.write(frame(first.SerializeToString()))
        await writer.drain()
        await asyncio.sleep(3600)

    relay.relay_owners = {honest.peer_id: len(bundle), **{s.peer_id: 1000 for s in stallers}}
    stop, held = threading.Event(), []

    def hold(requester, owner):
        while not stop.is_set():
            start = time.monotonic()
            with contextlib.suppress(Exception):
                requester.pull_async(owner.peer_id, "groups", b"", 1 << 20, timeout=60, maddrs=boot,
                                     via=relay.peer_id).result(70)
            held.append(time.monotonic() - start)

    def probe_pull():
        return probe.pull_async(honest.peer_id, "groups", b"", 1 << 20, timeout=60, maddrs=boot,
                                via=relay.peer_id).result(70)

    try:
        for owner in stallers:
            owner._call(owner._node.p2p.add_binary_stream_handler(bundle_handler("t"), stall), timeout=30)
        assert probe_pull() == bundle
        for _ in range(100):  # served whole once: proven (the relay notes it once its stream has ended)
            if honest.peer_id in relay._proven:
                break
            time.sleep(0.05)
        assert honest.peer_id in relay._proven
        threads = [threading.Thread(target=hold, args=(r, o), daemon=True) for r in requesters for o in stallers]
        for t in threads:
            t.start()
        time.sleep(1.5)  # (2 requesters x 2 pulls fill the strangers' 4 slots; the rest are refused)
        served = 0
        for _ in range(10):
            with contextlib.suppress(Exception):
                served += probe_pull() == bundle
            time.sleep(0.1)
        stop.set()
        assert served >= 10 and relay.intake.refused["relay-full"] > 0, (served, dict(relay.intake.refused))
        assert relay.intake.refused["relay-slow"] > 0 and max(held) < 1.0 + 5.0 + 5.0  # (was RELAY_TIMEOUT)
        assert all(s.peer_id not in relay._proven for s in stallers)
    finally:
        stop.set()
        for node in (probe, *requesters, *stallers, honest, relay):
            node.shutdown()
