"""Version-2 bundles (protocol/bundle2.py): the groups real zoo models sample come back exactly as version 1
gives them, in at most 3 bytes per completion token, and hostile bytes are one RecordError, never more."""
import contextlib
import dataclasses

import msgpack
import numpy as np
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.bundle2 import MAGIC, pack_bundle2, pack_groups, unpack_bundle2, unpack_groups
from protocol.codec import Limits, RecordError, decode_group, encode_group, pack_bundle

QWEN_WIDTH = 151_936  # ids of 3 bytes


@pytest.fixture(scope="module")
def wires():
    from bench.network import bundle as bench_bundle

    return bench_bundle.real_groups("tiny-add", "arith", 8, prompts=16, group_size=8)


def restamped(wires, vocab_size):
    card = dataclasses.replace(wires[0].card, vocab_size=vocab_size)
    return [dataclasses.replace(w, card=card) for w in wires]


def fields(bundle: bytes) -> list:
    return msgpack.unpackb(zstandard.ZstdDecompressor().stream_reader(bundle[len(MAGIC):]).read(), raw=False)


def bundle(fields_: list) -> bytes:
    return MAGIC + zstandard.ZstdCompressor().compress(msgpack.packb(fields_, use_bin_type=True))


@pytest.mark.parametrize("width", [None, QWEN_WIDTH])
def test_real_groups_round_trip_to_the_same_groups_in_a_quarter_of_the_bytes(wires, width):
    groups = restamped(wires, width) if width else wires
    vocab = groups[0].card.vocab_size
    records = [encode_group(g) for g in groups]
    v2 = pack_bundle2(groups)
    back = unpack_bundle2(v2)
    assert [decode_group(r, vocab) for r in back] == [decode_group(r, vocab) for r in records]
    tokens = sum(len(c.token_ids) for g in groups for c in g.completions)
    v1, _ = pack_bundle(records, Limits().max_bytes)
    assert len(v2) / tokens <= 3.0 and len(v2) <= len(v1) / 3, (len(v2) / tokens, len(v1) / tokens)


def test_a_bundle_is_one_card_and_bounded(wires):
    other = dataclasses.replace(wires[1], card=dataclasses.replace(wires[1].card, lora=True))
    with pytest.raises(ValueError, match="one model card"):
        pack_bundle2([wires[0], other])
    with pytest.raises(ValueError, match="at least one"):
        pack_bundle2([])


def test_hostile_bundles_are_refused_by_reason(wires):
    good = fields(pack_bundle2(wires[:2]))
    assert len(unpack_bundle2(bundle(good))) == 2

    def refused(fields_, reason, limits=None):
        with pytest.raises(RecordError) as err:
            unpack_bundle2(bundle(fields_), limits)
        assert err.value.reason == reason, err.value

    refused([good[0] + 1, *good[1:]], "version")
    refused(good[:-1], "malformed")  # a field missing
    refused([*good[:3], good[3][:-2], *good[4:]], "malformed")  # one length fewer than completions
    refused([*good[:6], good[6] + b"\x00", *good[7:]], "malformed")  # one id byte too many
    refused([*good[:7], b"\x01", *good[8:]], "malformed")  # a third id byte where the vocabulary has 2
    headers = [list(h) for h in good[2]]
    headers[0][7] = 10_000  # more completions than anyone accepts
    refused([*good[:2], headers, *good[3:]], "malformed")
    headers = [list(h) for h in good[2]]
    headers[0][2] = 7  # a task that is not a string
    refused([*good[:2], headers, *good[3:]], "malformed")
    lengths = np.frombuffer(good[3], dtype="<u2").copy()
    refused(good, "length", Limits(max_tokens=int(lengths.max()) - 1))  # longer than our generation limit
    with pytest.raises(RecordError, match="not a version-2 bundle"):
        unpack_bundle2(msgpack.packb([b"a v1 bundle"]))
    with pytest.raises(RecordError) as err:
        unpack_bundle2(MAGIC + b"not zstd at all")
    assert err.value.reason == "malformed"
    bomb = MAGIC + zstandard.ZstdCompressor().compress(bytes(64 * 1024 * 1024))  # 64 MiB of zeros in ~2 KB
    assert len(bomb) < 10_000
    with pytest.raises(RecordError) as err:
        unpack_bundle2(bomb)
    assert err.value.reason == "oversize"


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_any_corruption_is_a_record_error_or_groups_the_trust_boundary_checks(wires, data):
    raw = bytearray(msgpack.packb(fields(pack_bundle2(wires[:3])), use_bin_type=True))
    for _ in range(data.draw(st.integers(1, 8))):
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    try:
        records = unpack_bundle2(MAGIC + zstandard.ZstdCompressor().compress(bytes(raw)))
    except RecordError:
        return
    for record in records:  # whatever got through is a record decode_group judges, never a crash
        with contextlib.suppress(RecordError):
            decode_group(record, 99)


def test_what_a_peer_serves_is_the_prefix_of_its_groups_that_fits(wires):
    whole, left = pack_groups(wires, Limits().max_bytes)
    assert left == 0 and unpack_groups(whole, Limits()) == unpack_bundle2(pack_bundle2(wires))
    part, left = pack_groups(wires, len(whole) // 2)  # half the room: a shorter prefix, every group of it whole
    kept = unpack_groups(part, Limits())
    assert len(part) <= len(whole) // 2 and 0 < len(kept) < len(wires) and left == len(wires) - len(kept)
    vocab = wires[0].card.vocab_size
    assert [decode_group(r, vocab) for r in kept] == [decode_group(encode_group(w), vocab) for w in wires[:len(kept)]]
    for groups, room in (([], 1 << 20), (wires, 8)):  # nothing to serve, or no room: an empty list of records
        empty, left = pack_groups(groups, room)
        assert unpack_groups(empty, Limits()) == [] and left == len(groups)


def test_a_peer_reads_both_layouts_and_refuses_what_is_neither(wires):
    records = [encode_group(w) for w in wires[:3]]
    assert unpack_groups(pack_bundle(records, 1 << 20)[0], Limits()) == records  # a list of records (version 1's)
    with pytest.raises(RecordError, match="bundle"):
        unpack_groups(MAGIC + b"not zstd", Limits())
    with pytest.raises(RecordError, match="bundle"):
        unpack_groups(b"\x93\x01", Limits())
