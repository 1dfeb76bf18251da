"""Bounded intake for the streams a stranger can open to us: a request is read under limits of size, time and
rate before anything parses it.

hivemind's protobuf handlers read a request with `P2P.receive_raw_data`, which trusts the 8-byte length the
sender writes and waits for that many bytes with no time limit: one stream announcing 16 GiB made a peer buffer
whatever arrived (issue 23: RSS +1.4 GB from 768 MiB sent), and a stream that sends 3 bytes and stops held a
file descriptor for ever. The bundle handler is therefore registered as a raw stream handler that reads the
same framing itself (a one-byte marker, an 8-byte big-endian length, the message) and refuses:
- a length above the request's type limit (a `BundleRequest` is under a few hundred bytes) at the header,
  before reading the body;
- a request not complete within `timeout` seconds of the stream's opening;
- a stream beyond `per_peer` open at once from one peer, or `total` in all, or beyond one peer's request rate
  (a token bucket of `rate` a second, `burst` deep).
Answers go out in hivemind's framing, so callers keep using `P2P.iterate_protobuf_handler`.

The requester's side (`Pacer`): our own requests to one peer are spaced under the rate a peer admits, so an
honest peer whose steps are short (0.15 s with the zoo's models: 4 requests a step to its one partner, 27 a
second) is never refused for its rate; a refused stream reads as an unreachable sender and backs it off.
"""
from __future__ import annotations

import asyncio
import collections
import contextlib
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from google.protobuf.message import DecodeError

from protocol import swarm_pb2 as pb

MESSAGE_MARKER = b"\x00"  # hivemind's P2P.MESSAGE_MARKER: a message follows
ERROR_MARKER = b"\x01"  # hivemind's P2P.ERROR_MARKER: an error follows (its callers' end-of-stream mark too)
HEADER_LEN = 8  # hivemind's P2P.HEADER_LEN: the big-endian length of the message


class IntakeRefused(Exception):
    """A stream refused before its request was parsed; `reason` names the limit (size, time, frame, streams,
    rate)."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


async def read_frame(reader: asyncio.StreamReader, max_bytes: int, timeout: float) -> tuple[bytes, bytes]:
    """The next (marker, message) of a stream in hivemind's framing, the message at most `max_bytes` long and
    complete within `timeout` seconds; IntakeRefused otherwise (a length above the limit is refused at the
    header: nothing more is read)."""
    async def read() -> tuple[bytes, bytes]:
        marker = await reader.readexactly(1)
        if marker not in (MESSAGE_MARKER, ERROR_MARKER):
            raise IntakeRefused("frame", f"marker {marker!r}")
        length = int.from_bytes(await reader.readexactly(HEADER_LEN), "big")
        if length > max_bytes:
            raise IntakeRefused("size", f"a request of {length} bytes > {max_bytes}")
        return marker, await reader.readexactly(length)

    try:
        return await asyncio.wait_for(read(), timeout)
    except asyncio.TimeoutError:
        raise IntakeRefused("time", f"no complete request within {timeout:g} s") from None
    except asyncio.IncompleteReadError as err:
        raise IntakeRefused("frame", f"the stream ended after {len(err.partial)} bytes of a part") from None


async def read_request(reader: asyncio.StreamReader, max_bytes: int, timeout: float) -> bytes:
    """A stream's request: its first message, then the end-of-stream mark hivemind's callers send after it
    (read too, within the same time, so that closing our side never cuts the answer short)."""
    deadline = asyncio.get_running_loop().time() + timeout
    marker, request = await read_frame(reader, max_bytes, timeout)
    if marker != MESSAGE_MARKER:
        raise IntakeRefused("frame", "an error mark instead of a request")
    left = deadline - asyncio.get_running_loop().time()
    if left > 0:
        with contextlib.suppress(IntakeRefused):  # a caller that sends no end mark: answered all the same
            await read_frame(reader, max_bytes, left)
    return request


REQUEST_KINDS = ("groups", "summaries", "view", "hello", "receipts")  # hello: "pull my view" (a push, gossip.py)
PEER_ID = re.compile(r"[1-9A-HJ-NP-Za-km-z]{1,128}")  # base58, as libp2p writes peer ids


def parse_request(data: bytes) -> pb.BundleRequest:
    """A `BundleRequest` whose fields are what a pull can name (IntakeRefused "request" otherwise): a kind we
    serve, a digest empty (the latest) or of 16 bytes, an owner empty or a base58 peer id. Its version is
    answered by the handler (another version gets "not served")."""
    try:
        request = pb.BundleRequest.FromString(data)
    except DecodeError as err:
        raise IntakeRefused("request", f"does not parse: {err}") from None
    if request.kind not in REQUEST_KINDS or len(request.digest) not in (0, 16) or (
            request.owner and not PEER_ID.fullmatch(request.owner)):
        raise IntakeRefused("request", f"kind {request.kind[:16]!r}, {len(request.digest)}-byte digest, "
                                       f"owner {request.owner[:16]!r}")
    return request


def frame(message: bytes) -> bytes:
    """One message in hivemind's framing (what `P2P.send_protobuf` writes)."""
    return MESSAGE_MARKER + len(message).to_bytes(HEADER_LEN, "big") + message


@dataclass
class _Bucket:
    tokens: float
    stamp: float
    open: int = 0


@dataclass
class StreamLimits:
    """Open streams and request rate per remote peer, and open streams in all. Remembers at most `peers` peers
    (the least recently seen idle one is forgotten first), so a crowd of identities costs bounded memory."""

    per_peer: int = 8  # an honest peer opens up to 4 at once (groups, summaries, its view, a push), more while
    #                    a slow pull of the step before is still running: 4 was the honest peak, no margin
    total: int = 64
    rate: float = 20.0  # requests a second per peer, on average (an honest receiver: 2 a step, a few a second)
    burst: float = 60.0  # requests one peer may make at once
    peers: int = 4096
    clock: Callable[[], float] = time.monotonic
    _buckets: collections.OrderedDict = field(default_factory=collections.OrderedDict)
    _open: int = 0
    # reason -> streams refused: `admit` counts its own (streams, rate); the handler that reads and serves the
    # stream adds the rest (size, time, frame, request, relay-owner, relay-full, relay-rate, serve-time, malformed)
    refused: collections.Counter = field(default_factory=collections.Counter)

    def admit(self, peer: str) -> None:
        """Counts a new stream of `peer` in, or raises IntakeRefused (streams, rate); `release` it when done."""
        now = self.clock()
        bucket = self._buckets.get(peer)
        if bucket is None:
            self._forget_idle(self.peers - 1)  # room for this one
            bucket = _Bucket(self.burst, now)
            self._buckets[peer] = bucket
        self._buckets.move_to_end(peer)
        bucket.tokens = min(self.burst, bucket.tokens + (now - bucket.stamp) * self.rate)
        bucket.stamp = now
        if self._open >= self.total or bucket.open >= self.per_peer:
            self.refused["streams"] += 1
            raise IntakeRefused("streams", f"{bucket.open} open from this peer, {self._open} in all")
        if bucket.tokens < 1.0:
            self.refused["rate"] += 1
            raise IntakeRefused("rate", f"more than {self.rate:g} requests a second")
        bucket.tokens -= 1.0
        bucket.open += 1
        self._open += 1

    def release(self, peer: str) -> None:
        bucket = self._buckets.get(peer)
        if bucket is not None and bucket.open > 0:
            bucket.open -= 1
            self._open -= 1

    def open_streams(self, peer: str | None = None) -> int:
        if peer is None:
            return self._open
        bucket = self._buckets.get(peer)
        return bucket.open if bucket is not None else 0

    def _forget_idle(self, keep: int) -> None:
        """Forgets the least recently seen peers with no open stream while more than `keep` are remembered."""
        for name in list(self._buckets):
            if len(self._buckets) <= keep:
                return
            if self._buckets[name].open == 0:
                del self._buckets[name]


@dataclass
class Pacer:
    """Spaces our requests to each peer: after a `burst`, at most `rate` a second (under what StreamLimits
    admits by default). Remembers at most `peers` peers (the least recently used forgotten first)."""

    rate: float = StreamLimits.rate * 0.75  # the rest of the peer's rate, and half its burst, is the margin for
    burst: float = StreamLimits.burst / 2  #   requests that travel at uneven speeds and arrive bunched
    peers: int = 4096
    clock: Callable[[], float] = time.monotonic
    _buckets: collections.OrderedDict = field(default_factory=collections.OrderedDict)  # peer -> (tokens, stamp)

    def delay(self, peer: str, most: float = math.inf) -> float | None:
        """Books the next request to `peer`: how many seconds to wait before opening its stream (0: at once), or
        None, booking nothing, when that would be more than `most` seconds. Tokens below zero are slots booked
        ahead, so requests made together are spaced 1/rate apart."""
        now = self.clock()
        tokens, stamp = self._buckets.pop(peer, (self.burst, now))
        tokens = min(self.burst, tokens + (now - stamp) * self.rate)
        wait = max((1.0 - tokens) / self.rate, 0.0)
        if wait > most:
            self._buckets[peer] = (tokens, now)
            return None
        self._buckets[peer] = (tokens - 1.0, now)
        while len(self._buckets) > self.peers:
            self._buckets.popitem(last=False)
        return wait
