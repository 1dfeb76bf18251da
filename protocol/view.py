"""A sample of a peer's view as it serves it (bundle kind "view", docs/PROTOCOL.md section 7): other peers'
announcements, each with its owner's signature, so whoever passes one on cannot alter it.

    msgpack [[subkey, announcement, signature], ...]   (at most MAX_VIEW_ENTRIES, the server's own first)

`subkey` is the owner's DHT identity (its public key), `announcement` the bytes it announces (protocol/codec.py,
the same value it stores in the DHT) and `signature` its signature of `bundle_statement("ann", digest)`: the
statement it signs for the one-entry bundle of kind "ann" it serves. A receiver checks each signature against
the subkey, then decodes and checks the announcement as one read from the DHT; this module only bounds the
structure.
"""
from __future__ import annotations

from dataclasses import dataclass

import msgpack

from . import MAX_ANNOUNCEMENT
from .codec import RecordError

MAX_VIEW_ENTRIES = 8  # entries in one served sample of a view
MAX_SUBKEY = 1024  # bytes of an identity (an RSA-2048 owner marker is about 300)
MAX_SIGNATURE = 1024  # bytes of a signature (RSA-2048: 256)
MAX_VIEW_BYTES = MAX_VIEW_ENTRIES * (MAX_SUBKEY + MAX_ANNOUNCEMENT + MAX_SIGNATURE + 16) + 16


@dataclass(frozen=True)
class SignedAnnouncement:
    subkey: bytes
    value: bytes
    signature: bytes


def pack_view(entries: list[SignedAnnouncement]) -> bytes:
    """The first MAX_VIEW_ENTRIES entries as a view bundle (entries beyond the limits are the caller's bug)."""
    entries = entries[:MAX_VIEW_ENTRIES]
    for e in entries:
        if len(e.subkey) > MAX_SUBKEY or len(e.value) > MAX_ANNOUNCEMENT or len(e.signature) > MAX_SIGNATURE:
            raise ValueError("a view entry over the protocol's limits")
    return msgpack.packb([[e.subkey, e.value, e.signature] for e in entries], use_bin_type=True)


def unpack_view(data: bytes) -> list[SignedAnnouncement]:
    """The entries of a view bundle; RecordError("oversize" or "malformed") for anything else."""
    if len(data) > MAX_VIEW_BYTES:
        raise RecordError("oversize", f"view bundle of {len(data)} bytes > {MAX_VIEW_BYTES}")
    try:
        items = msgpack.unpackb(data, raw=True, max_bin_len=MAX_ANNOUNCEMENT + MAX_SUBKEY,
                                max_array_len=MAX_VIEW_ENTRIES, max_map_len=0, max_str_len=0, max_ext_len=0)
    except (ValueError, msgpack.UnpackException, TypeError) as err:
        raise RecordError("malformed", f"view: {err}") from None
    if not isinstance(items, list):
        raise RecordError("malformed", "view is not a list")
    entries = []
    for item in items:
        if not (isinstance(item, list) and len(item) == 3 and all(isinstance(x, bytes) for x in item)):
            raise RecordError("malformed", "a view entry is not [subkey, announcement, signature]")
        subkey, value, signature = item
        if not subkey or len(subkey) > MAX_SUBKEY or not value or len(value) > MAX_ANNOUNCEMENT \
                or len(signature) > MAX_SIGNATURE:
            raise RecordError("malformed", "a view entry over the protocol's limits")
        entries.append(SignedAnnouncement(subkey, value, signature))
    return entries
