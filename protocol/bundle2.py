"""Bundles, version 2 (docs/PROTOCOL.md section 7): the same groups in about a third of the bytes.

A version-1 bundle is a msgpack list of `Group` records, each carrying its own model card and its ids and
log-probs per completion. Version 2 packs one peer's groups of one step (one model card) as:

    MAGIC | zstd( msgpack [version, card, headers, lengths, finishes, rewards, ids, high ids, log-probs] )

- `card`: the `ModelCard` message, once per bundle instead of once per group;
- `headers`: per group [step, created, task, task version, split, index, packed prompt ids, completions];
- `lengths`: every completion's token count, in order (uint16); `finishes`: one byte each (the `Finish`
  enum); `rewards`: float16 each (informational: every receiver scores again);
- `ids`: every completion's ids, concatenated, at the vocabulary's width up to 2 bytes; a wider vocabulary
  (Qwen2.5's 151,936) puts the low 2 bytes there and the third in `high ids`, a column of its own that is
  nearly constant and compresses to almost nothing (ids kept whole and in order are what zstd finds repeated:
  the completions of one prompt share most of their text); `log-probs`: float16, concatenated.

Measured on real groups (bench/network/bundle.py; one bundle of 16 groups x 8): tiny-add 11.8 -> 2.9 B/token,
digit-add 3.9 -> 1.3, SmolLM2-135M 4.9 -> 3.3 and, at a 151,936-id width, 6.1 -> 3.3 (version 1 -> 2).

The receiver never trusts any of it. `unpack_bundle2` bounds the decompressed size before decompressing
(a frame that would expand past the receiver's byte budget is refused), checks every count and length against
its limits and the columns' sizes, and returns version-1 `Group` records: each then goes through the one trust
boundary every record goes through (`decode_group`: vocabulary, lengths, log-prob bounds, task). A bundle that
fails a structural check is refused whole ("malformed", or the limit's reason), counted once.
"""
from __future__ import annotations

import io

import msgpack
import numpy as np
from google.protobuf.message import DecodeError

from . import PROTOCOL_VERSION
from . import swarm_pb2 as pb
from .codec import (
    FINISH,
    MAX_BUNDLE,
    Limits,
    RecordError,
    WireGroup,
    _card_message,
    check_vocab_size,
    id_width,
    pack_bundle,
    pack_ids,
    pack_logprobs,
    unpack_bundle,
)

MAGIC = b"SGB2"  # the first bytes of a version-2 bundle (a version-1 bundle starts with a msgpack array)
ZSTD_LEVEL = 6  # (level 3: 0.05-0.11 B/token more on these groups; either packs a bundle in ~2 ms)
_HEADER_FIELDS = 8


def _id_columns(ids: list[int], vocab_size: int) -> tuple[bytes, bytes]:
    """(ids at up to 2 bytes each, their third bytes or b"") for ids below vocab_size."""
    if id_width(vocab_size) <= 2:
        return pack_ids(ids, vocab_size), b""
    arr = np.frombuffer(pack_ids(ids, vocab_size), dtype=np.uint8).reshape(-1, 3)
    return arr[:, :2].tobytes(), arr[:, 2].tobytes()


def _v1_ids(low: bytes, high: bytes, width: int) -> bytes:
    """Version 1's packing (width bytes, little-endian) of ids given as version 2's columns."""
    if width <= 2:
        return low
    return np.concatenate([np.frombuffer(low, dtype=np.uint8).reshape(-1, 2),
                           np.frombuffer(high, dtype=np.uint8).reshape(-1, 1)], axis=1).tobytes()


def pack_bundle2(groups: list[WireGroup]) -> bytes:
    """One peer's groups of one step (one model card: the first group's) as a version-2 bundle."""
    import zstandard

    if not groups:
        raise ValueError("a bundle holds at least one group")
    if len(groups) > MAX_BUNDLE:
        raise ValueError(f"a bundle holds at most {MAX_BUNDLE} groups")
    card = groups[0].card
    if any(g.card != card for g in groups):
        raise ValueError("every group of a bundle comes from one model card")
    vocab = card.vocab_size
    headers, lengths, finishes, rewards, ids, logprobs = [], [], bytearray(), [], [], []
    for g in groups:
        headers.append([g.step, g.created, g.task, g.task_version, g.split, g.index,
                        pack_ids(g.prompt_ids, vocab), len(g.completions)])
        for c in g.completions:
            if not 1 <= len(c.token_ids) < 1 << 16:
                raise ValueError(f"a completion of {len(c.token_ids)} tokens (1..65535)")
            lengths.append(len(c.token_ids))
            finishes.append(FINISH[c.finish_reason])
            rewards.append(c.reward)
            ids.extend(c.token_ids)
            logprobs.append(pack_logprobs(c.logprobs))
    low, high = _id_columns(ids, vocab)
    payload = msgpack.packb([PROTOCOL_VERSION, _card_message(card).SerializeToString(), headers,
                             np.asarray(lengths, dtype="<u2").tobytes(), bytes(finishes),
                             np.asarray(rewards, dtype=np.float32).astype("<f2").tobytes(), low, high,
                             b"".join(logprobs)], use_bin_type=True)
    return MAGIC + zstandard.ZstdCompressor(level=ZSTD_LEVEL).compress(payload)


def is_bundle2(data: bytes) -> bool:
    return data[:len(MAGIC)] == MAGIC


def _decompress(data: bytes, limit: int) -> bytes:
    """The payload, refused before it grows past `limit` bytes (a small frame may expand without bound)."""
    import zstandard

    try:
        with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data[len(MAGIC):])) as reader:
            payload = reader.read(limit + 1)
    except zstandard.ZstdError as err:
        raise RecordError("malformed", f"bundle: {err}") from None
    if len(payload) > limit:
        raise RecordError("oversize", f"bundle expands past {limit} bytes")
    return payload


def _column(value, itemsize: int, count: int, what: str) -> bytes:
    if not isinstance(value, bytes) or len(value) != itemsize * count:
        raise RecordError("malformed", f"bundle: {what} column does not hold {count} values")
    return value


def unpack_bundle2(data: bytes, limits: Limits | None = None) -> list[bytes]:
    """The groups of a version-2 bundle as version-1 `Group` records (for `decode_group`), or RecordError."""
    limits = limits or Limits()
    if not isinstance(data, bytes) or not is_bundle2(data):
        raise RecordError("malformed", "not a version-2 bundle")
    if len(data) > limits.max_bytes:
        raise RecordError("oversize", f"{len(data)} bytes > budget {limits.max_bytes}")
    payload = _decompress(data, limits.max_bytes)
    try:
        fields = msgpack.unpackb(payload, raw=False, max_bin_len=limits.max_bytes, max_str_len=limits.max_text,
                                 max_array_len=max(MAX_BUNDLE, _HEADER_FIELDS), max_map_len=0, max_ext_len=0,
                                 strict_map_key=True)
    except (ValueError, msgpack.UnpackException, TypeError) as err:
        raise RecordError("malformed", f"bundle: {err}") from None
    if not isinstance(fields, list) or len(fields) != 9:
        raise RecordError("malformed", "bundle: not the 9 fields of version 2")
    version, card_bytes, headers, lengths, finishes, rewards, low, high, lp_column = fields
    if version != PROTOCOL_VERSION:
        raise RecordError("version", f"protocol version {version!r}, this peer speaks {PROTOCOL_VERSION}")
    if not isinstance(card_bytes, bytes) or not isinstance(headers, list) or not 1 <= len(headers) <= MAX_BUNDLE:
        raise RecordError("malformed", "bundle: a card and 1 to 256 groups expected")
    card = pb.ModelCard()
    try:
        card.ParseFromString(card_bytes)
    except DecodeError as err:
        raise RecordError("malformed", f"bundle card: {err}") from None
    check_vocab_size(card.vocab_size)
    width = id_width(card.vocab_size)
    counts = []
    for h in headers:
        if (not isinstance(h, list) or len(h) != _HEADER_FIELDS or type(h[7]) is not int
                or not 2 <= h[7] <= limits.max_completions):
            raise RecordError("malformed", "bundle: a group header is not [step, created, task, version, split, "
                                           f"index, prompt, completions (2..{limits.max_completions})]")
        counts.append(h[7])
    total = sum(counts)
    n = np.frombuffer(_column(lengths, 2, total, "length"), dtype="<u2").astype(np.int64)
    if n.size and (n.min() < 1 or n.max() > limits.max_tokens):
        raise RecordError("length", f"a completion of {int(n.max())} tokens (1..{limits.max_tokens})")
    tokens = int(n.sum())
    _column(finishes, 1, total, "finish")
    reward = np.frombuffer(_column(rewards, 2, total, "reward"), dtype="<f2").astype(np.float32)
    ids = _v1_ids(_column(low, min(width, 2), tokens, "id"), _column(high, max(width - 2, 0), tokens, "high id"),
                  width)
    lps = _column(lp_column, 2, tokens, "log-prob")
    records, c, t = [], 0, 0
    for h, count in zip(headers, counts, strict=True):
        step, created, task, task_version, split, index, prompt = h[:7]
        if not (type(step) is int and type(created) in (int, float) and type(index) is int  # (not bool)
                and all(type(x) is str for x in (task, task_version, split)) and type(prompt) is bytes
                and 0 <= step < 1 << 64 and 0 <= index < 1 << 64):
            raise RecordError("malformed", "bundle: a group header of the wrong types")
        msg = pb.Group(version=PROTOCOL_VERSION, step=step, created=float(created),
                       task=pb.TaskRef(task=task, version=task_version, split=split, index=index),
                       prompt_ids=prompt, card=card)
        for j in range(c, c + count):
            k = int(n[j])
            msg.completions.add(token_ids=ids[t * width:(t + k) * width], logprobs=lps[t * 2:(t + k) * 2],
                                finish=finishes[j], reward=float(reward[j]))
            t += k
        c += count
        records.append(msg.SerializeToString())
    return records


def pack_groups(groups: list[WireGroup], max_bytes: int) -> tuple[bytes, int]:
    """The groups bundle a peer serves: version 2 of the longest prefix of `groups` (at most MAX_BUNDLE) that fits
    max_bytes; no group, or none that fits: an empty list. Returns (bundle, groups left out)."""
    n = min(len(groups), MAX_BUNDLE)
    while n:
        data = pack_bundle2(groups[:n])
        if len(data) <= max_bytes:
            return data, len(groups) - n
        n = min(n - 1, n * max_bytes // len(data))
    return pack_bundle([], max_bytes)[0], len(groups)


def unpack_groups(data: bytes, limits: Limits) -> list[bytes]:
    """A pulled groups bundle's `Group` records (for `decode_group`), or RecordError: version 2 (what peers
    serve), or a list of records (version 1's layout: an empty bundle, and what tools and tests write)."""
    return unpack_bundle2(data, limits) if is_bundle2(data) else unpack_bundle(data, limits.max_bytes)
