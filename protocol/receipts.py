"""Receipts on the wire: what a receiver trained on of one generator's groups at one of its steps, signed by the
receiver (docs/PROTOCOL.md section 9).

A receipt names the receiver (peer id, and identity: its DHT subkey, which holds its public key), the generator
it credits, the receiver's step, and each of the generator's groups it used by what binds the group to its
generator (the drawn item index and the second it was drawn: protocol/codec.py `drawn_index`), with the rows of it
in the receiver's loss. The receiver signs `bundle_statement("receipt", receipt_digest(receipt))` with its
identity key, as it signs its bundles; checking the signature, and that the key owns the receiver's peer id, is
the transport's (node/swarm/receipts.py). Everything here is pure: encoding, and decoding under size limits.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
from google.protobuf.message import DecodeError

from . import PROTOCOL_VERSION
from . import swarm_pb2 as pb
from .codec import Limits, RecordError, _check_text, _parse


class ReceiptError(ValueError):
    """A receipt that does not decode or check out (not a group record: counted apart from records)."""


MAX_RECEIPT_GROUPS = 256  # groups of one generator one receipt names (a step uses fewer)
MAX_RECEIPT_BYTES = 8192  # one signed receipt: 256 groups at ~17 bytes, a 2048-bit key and signature, ids
MAX_KEY_BYTES = 1024  # a receiver's identity (its DHT subkey: an RSA key in OpenSSH encoding, ~390 bytes)


@dataclass(frozen=True)
class ReceiptGroup:
    index: int  # the item index its generator drew
    created: float  # the second it drew it
    rows: int  # its completions in the receiver's loss


@dataclass(frozen=True)
class Receipt:
    receiver: str  # peer id
    receiver_key: bytes  # its identity: its DHT subkey (hivemind's owner marker around its public key)
    generator: str  # the credited peer id
    step: int  # the receiver's step that used the groups
    created: float  # the receiver's DHT time when it signed
    task: str
    groups: tuple[ReceiptGroup, ...]

    @property
    def rows(self) -> int:
        return sum(g.rows for g in self.groups)


def encode_receipt(r: Receipt) -> bytes:
    if not 1 <= len(r.groups) <= MAX_RECEIPT_GROUPS:
        raise ValueError(f"a receipt names 1..{MAX_RECEIPT_GROUPS} groups, not {len(r.groups)}")
    return pb.Receipt(version=PROTOCOL_VERSION, receiver=r.receiver, receiver_key=r.receiver_key,
                      generator=r.generator, step=r.step, created=r.created, task=r.task,
                      groups=[pb.ReceiptGroup(index=g.index, created=g.created, rows=g.rows) for g in r.groups]
                      ).SerializeToString()


def receipt_digest(body: bytes) -> bytes:
    """The digest the receiver signs of an encoded receipt, as kind "receipt" (`bundle_statement`)."""
    return hashlib.blake2b(body, digest_size=16).digest()


def pack_signed(body: bytes, signature: bytes) -> bytes:
    """A signed receipt as it travels and is kept (in a receipts bundle, in a receipts file)."""
    data = pb.SignedReceipt(receipt=body, signature=signature).SerializeToString()
    if len(data) > MAX_RECEIPT_BYTES:
        raise ValueError(f"a signed receipt of {len(data)} bytes > {MAX_RECEIPT_BYTES}")
    return data


def unpack_signed(data: bytes) -> tuple[bytes, bytes]:
    """(encoded receipt, signature) of a signed receipt; ReceiptError when malformed or too large."""
    if not isinstance(data, bytes) or len(data) > MAX_RECEIPT_BYTES:
        raise ReceiptError(f"a signed receipt of more than {MAX_RECEIPT_BYTES} bytes, or not bytes")
    msg = pb.SignedReceipt()
    try:
        msg.ParseFromString(data)
    except DecodeError:
        raise ReceiptError("a signed receipt that does not parse") from None
    if not msg.receipt or not msg.signature:
        raise ReceiptError("a signed receipt without its receipt or signature")
    return bytes(msg.receipt), bytes(msg.signature)


def decode_receipt(body: bytes) -> Receipt:
    """Parses and checks an encoded receipt's shape (not its signature); ReceiptError when it is not one."""
    limits = Limits(max_bytes=MAX_RECEIPT_BYTES)
    try:
        msg = _parse(body, limits, pb.Receipt)
    except RecordError as err:
        raise ReceiptError(str(err)) from None
    if not msg.receiver or not msg.generator or not 0 < len(msg.receiver_key) <= MAX_KEY_BYTES:
        raise ReceiptError("a receipt without receiver, generator or key")
    if not 1 <= len(msg.groups) <= MAX_RECEIPT_GROUPS or not np.isfinite(msg.created):
        raise ReceiptError(f"a receipt of {len(msg.groups)} groups (1..{MAX_RECEIPT_GROUPS})")
    if any(not np.isfinite(g.created) or g.rows == 0 for g in msg.groups):
        raise ReceiptError("a receipt naming a group with no rows or no time")
    try:
        return Receipt(receiver=_check_text("receiver", msg.receiver, limits), receiver_key=bytes(msg.receiver_key),
                       generator=_check_text("generator", msg.generator, limits), step=msg.step,
                       created=msg.created, task=_check_text("task", msg.task, limits),
                       groups=tuple(ReceiptGroup(g.index, g.created, g.rows) for g in msg.groups))
    except RecordError as err:
        raise ReceiptError(str(err)) from None
