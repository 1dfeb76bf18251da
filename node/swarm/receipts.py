"""Signed receipts (docs/PROTOCOL.md section 9): credit a volunteer can check.

As a receiver, a peer notes each received group it trains on (whose, which group, how many rows) and, with its next
announcement, signs one receipt per generator for that step and serves its newest receipts as its "receipts"
bundle. As a generator, a peer pulls the receipts bundle of each peer whose announcement credits it, and keeps
the receipts that name it after checking them:
- signed by the key of the announcement it pulled (the receiver's identity), which owns the receiver's peer id;
- every group named is one this peer published (its drawn index and second, remembered for PUBLISHED_MEMORY
  groups): a receipt cannot credit us with a group we never made, and a receiver's receipt credits the
  generator the front-running fix (draws.py) found, never a copier;
- each group counted once per receiver, however many receipts name it.
The credited peer cannot forge or inflate a receipt (it holds no receiver's key); a receiver it runs itself (a
Sybil) signs what it likes, which is why credit is shown by receiver. Kept receipts go to `<out>/receipts.jsonl`
(the newest KEPT), which anyone checks with `swarm credit verify FILE` (`verify_line`: the receiver's public key
is in the receipt, and must own its peer id).
"""
from __future__ import annotations

import base64
import collections
import json
import logging
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path

from node.errors import first_line
from protocol.codec import pack_bundle, unpack_bundle
from protocol.receipts import (
    MAX_RECEIPT_GROUPS,
    Receipt,
    ReceiptError,
    ReceiptGroup,
    decode_receipt,
    encode_receipt,
    pack_signed,
    receipt_digest,
    unpack_signed,
)

from . import SwarmTransport, finished
from .bounded import BoundedSet

log = logging.getLogger(__name__)
SERVED = 64  # our newest signed receipts in the bundle we serve (a generator pulling every few steps sees each)
BUNDLE_BYTES = 256 * 1024  # the largest receipts bundle we serve or pull
PUBLISHED_MEMORY = 65536  # our own published groups a receipt may name
COUNTED_MEMORY = 262144  # (receiver, group) pairs counted already
KEPT = 4096  # receipts kept in the receipts file (the newest; rewritten at twice that)
PULLS_IN_FLIGHT = 2
PULL_TIMEOUT = 30.0


@dataclass
class Credit:
    """What verified receipts say other peers trained on of ours."""

    receipts: int = 0
    groups: int = 0
    rows: int = 0
    by_receiver: collections.Counter = field(default_factory=collections.Counter)  # receiver peer id -> rows

    @property
    def receivers(self) -> int:
        return len(self.by_receiver)


def check_receipt(signed: bytes, verify: Callable[[bytes, bytes, bytes], bool],
                  owns: Callable[[bytes, str], bool]) -> Receipt:
    """A signed receipt's content when its signature is the receiver's and the receiver's key owns its peer id;
    ReceiptError otherwise. verify(digest, signature, key), owns(key, peer id): the transport's."""
    body, signature = unpack_signed(signed)
    receipt = decode_receipt(body)
    if not owns(receipt.receiver_key, receipt.receiver):
        raise ReceiptError(f"a receipt naming receiver {receipt.receiver[:16]!r}, which its key does "
                                     f"not own")
    if not verify(receipt_digest(body), signature, receipt.receiver_key):
        raise ReceiptError("a receipt whose signature is not its receiver's")
    return receipt


def receipt_line(signed: bytes, receipt: Receipt) -> str:
    """A kept receipt as one line of the receipts file: readable fields, and the signed bytes that prove them
    (only those count when it is verified)."""
    return json.dumps({"receiver": receipt.receiver, "generator": receipt.generator, "step": receipt.step,
                       "task": receipt.task, "groups": len(receipt.groups), "rows": receipt.rows,
                       "signed": base64.b64encode(signed).decode()}, sort_keys=True)


def verify_line(line: str) -> Receipt:
    """A receipts file's line checked with real keys (offline, no swarm needed): its receipt, or ReceiptError."""
    from .dht import peer_id_of, signature_check

    try:
        signed = base64.b64decode(json.loads(line)["signed"], validate=True)
    except (ValueError, KeyError, TypeError):
        raise ReceiptError("not a receipt line (JSON with a base64 \"signed\" field)") from None
    return check_receipt(signed, lambda digest, sig, key: signature_check("receipt", key)(digest, sig),
                         lambda key, peer_id: bool(peer_id) and peer_id_of(key) == peer_id)


class Receipts:
    def __init__(self, transport: SwarmTransport, task: str, path: Path | None = None):
        """task: the task our groups are of; path: where kept receipts are written (None: nowhere)."""
        self.transport, self.task, self.path = transport, task, path
        self.pending: dict[str, list[ReceiptGroup]] = {}  # generator peer id -> its groups we trained on at
        self.pending_step = -1  #                                                    our step pending_step
        self.served: collections.deque[bytes] = collections.deque(maxlen=SERVED)
        self.published = BoundedSet(PUBLISHED_MEMORY)  # (created, index) of our own groups
        self.counted = BoundedSet(COUNTED_MEMORY)  # (receiver, created, index) credited already
        self.pulled = BoundedSet(4096)  # digests of receipts bundles pulled already
        self.inflight: dict[bytes, Future] = {}  # receiver subkey -> its receipts bundle's pull
        self.wanted: collections.OrderedDict[bytes, tuple] = collections.OrderedDict()  # subkey -> (peer id, route)
        self.credit = Credit()
        self.refused = 0  # receipts naming us that did not check out
        self.lines = 0  # lines in the receipts file
        self._restore()

    def _restore(self) -> None:
        """The credit of the receipts kept in our receipts file by an earlier run (written by us once checked)."""
        if self.path is None or not self.path.is_file():
            return
        try:
            lines = self.path.read_text().splitlines()
        except OSError as err:
            log.warning("reading %s failed (%s); credit counts from now", self.path, err)
            return
        for line in lines:
            try:
                receipt = decode_receipt(unpack_signed(base64.b64decode(json.loads(line)["signed"]))[0])
            except (ValueError, KeyError, TypeError):  # (ReceiptError is a ValueError)
                continue  # (a line cut by a stop mid-write)
            self._count(receipt)
        self.lines = len(lines)

    # ---- as a receiver ---------------------------------------------------------------------------------
    def used(self, generator: str, index: int, created: float, rows: int, step: int) -> None:
        """Notes a received group we train on at our step `step` (generator: its peer id)."""
        if step != self.pending_step:  # (a step whose receipts were not issued: issued now, under their step)
            self.issue(self.transport.now())
            self.pending_step = step
        groups = self.pending.setdefault(generator, [])
        if len(groups) < MAX_RECEIPT_GROUPS:
            groups.append(ReceiptGroup(index, created, rows))

    def issue(self, now: float) -> bytes | None:
        """Signs one receipt per generator for the groups noted since the last call (all of one step); returns
        the receipts bundle to serve when there are new ones (None otherwise)."""
        if not self.pending:
            return None
        for generator, groups in self.pending.items():
            body = encode_receipt(Receipt(self.transport.peer_id, self.transport.own_subkey, generator,
                                          self.pending_step, now, self.task, tuple(groups)))
            self.served.append(pack_signed(body, self.transport.sign("receipt", receipt_digest(body))))
        self.pending = {}
        return pack_bundle(list(reversed(self.served)), BUNDLE_BYTES)[0]

    # ---- as a generator --------------------------------------------------------------------------------
    def published_group(self, created: float, index: int) -> None:
        self.published.add((created, index))

    def want(self, subkey: bytes, peer_id: str, digest: bytes, route: tuple[str, tuple[str, ...]]) -> None:
        """A peer whose announcement credits us serves this receipts bundle: pulled unless pulled already."""
        if digest not in self.pulled:  # (the newest of a peer's bundles: its receipts are the newest it signed)
            self.wanted[subkey] = (peer_id, digest, route)
            self.wanted.move_to_end(subkey)
            while len(self.wanted) > 256:
                self.wanted.popitem(last=False)

    def start(self) -> None:
        """Starts pulling wanted receipts bundles, PULLS_IN_FLIGHT at most (one a peer)."""
        for subkey in [k for k in self.wanted if k not in self.inflight]:
            if len(self.inflight) >= PULLS_IN_FLIGHT:
                break
            peer_id, digest, (via, maddrs) = self.wanted.pop(subkey)
            self.pulled.add(digest)
            try:
                self.inflight[subkey] = self.transport.pull_async(peer_id, "receipts", digest, BUNDLE_BYTES,
                                                                  PULL_TIMEOUT, maddrs=maddrs, signer=subkey, via=via)
            except (OSError, RuntimeError, ValueError) as err:
                log.debug("pulling receipts from %s failed to start: %s", peer_id, first_line(err))

    def collect(self, peer_of: Callable[[bytes], str]) -> int:
        """Takes the receipts bundles that arrived; returns the receipts newly kept. peer_of(subkey): the peer id
        its announcement names."""
        kept = 0
        for subkey, future in finished(self.inflight):
            try:
                bundle = future.result()
                records = unpack_bundle(bundle, BUNDLE_BYTES)
            except Exception as err:  # noqa: BLE001 (a failed pull is the receiver's problem, never ours)
                log.debug("pulling receipts failed: %s", first_line(err))
                continue
            kept += sum(self.take(signed, subkey, peer_of(subkey)) for signed in records)
        return kept

    def take(self, signed: bytes, signer: bytes, receiver: str) -> bool:
        """Keeps a receipt of `receiver` (identity `signer`) when it names us and checks out; False otherwise."""
        try:
            body, _ = unpack_signed(signed)
            if decode_receipt(body).generator != self.transport.peer_id:
                return False  # (another generator's: not ours to check)
            receipt = check_receipt(signed, lambda d, s, key: self.transport.verify("receipt", d, s, key),
                                    self.transport.owns)
            if receipt.receiver_key != signer or receipt.receiver != receiver:
                raise ReceiptError("a receipt served by another peer than its receiver")
            if any((g.created, g.index) not in self.published for g in receipt.groups):
                raise ReceiptError("a receipt naming a group we did not publish")
        except ReceiptError as err:
            self.refused += 1
            log.debug("a receipt from %s refused: %s", receiver, err)
            return False
        if not self._count(receipt):
            return False
        self._keep(receipt_line(signed, receipt))
        return True

    def _count(self, receipt: Receipt) -> bool:
        """Adds a receipt's groups not counted before for its receiver to our credit; False when none is new."""
        new = [g for g in receipt.groups if self.counted.add((receipt.receiver, g.created, g.index))]
        if not new:
            return False
        rows = sum(g.rows for g in new)
        self.credit.receipts += 1
        self.credit.groups += len(new)
        self.credit.rows += rows
        self.credit.by_receiver[receipt.receiver] += rows
        return True

    def _keep(self, line: str) -> None:
        """Appends a receipt to the receipts file, keeping the newest KEPT once it holds twice that."""
        if self.path is None:
            return
        try:
            with self.path.open("a") as out:
                out.write(line + "\n")
            self.lines += 1
            if self.lines >= 2 * KEPT:
                newest = self.path.read_text().splitlines()[-KEPT:]
                tmp = self.path.with_suffix(".tmp")
                tmp.write_text("".join(x + "\n" for x in newest))
                tmp.replace(self.path)
                self.lines = len(newest)
        except OSError as err:
            log.warning("writing a receipt to %s failed (%s); its credit still counts", self.path, err)
