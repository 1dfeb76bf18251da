"""Fuzzing every decoder a stranger reaches: none may crash, hang or grow memory on any input (issue 23).

Targets (what a stranger's bytes reach, in the order they reach them):

    request       a pull handler's request, read by node/swarm/intake.py read_request then parse_request
    chunks        a pulled stream: BundleChunk messages into protocol.codec.BundleAssembler
    bundle        a groups bundle's records, either layout (protocol.bundle2 unpack_groups: version 2's columns, or
                  a list of records as summaries bundles are)
    announcement  a DHT announcement value (decode_announcement)
    card          the model card a receiver peeks at before decoding a group (peek_card)
    group         a group record (decode_group, against our vocabulary and tokenizer)
    summary       a length summary (decode_summary)
    dht-record    a stored DHT sub-record through our nodes' schema validator (node/swarm/dht.py)

Each input is a valid encoding from a seed corpus, mutated (bytes flipped, cut, repeated, spliced with
another seed, protobuf varints set to extremes) or plain random bytes. A target passes an input when it returns
a value or refuses it with the protocol's own error (RecordError, IntakeRefused; a chunk the transport cannot
parse: DecodeError); anything else is a crash, reported with the input. Memory: the process's RSS after a
warm-up and at the end.

    python -m bench.attacks.fuzz [--inputs 1000000] [--targets group,chunks] [--seed 0]

tests/test_fuzz.py runs the same targets under hypothesis (property-based, shrinking) for a short CI run.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import time
from collections import Counter
from collections.abc import Callable

from google.protobuf.message import DecodeError

from node.swarm.intake import IntakeRefused, frame, parse_request, read_request
from node.system.process import rss_mb
from protocol import swarm_pb2 as pb
from protocol.bundle2 import pack_bundle2, unpack_groups
from protocol.codec import (
    PROTOCOL_VERSION,
    Announcement,
    BundleAssembler,
    BundleRef,
    LengthSummary,
    Limits,
    RecordError,
    WireCard,
    WireCompletion,
    WireGroup,
    bundle_chunks,
    bundle_digest,
    decode_announcement,
    decode_group,
    decode_summary,
    encode_announcement,
    encode_group,
    encode_summary,
    pack_bundle,
    peek_card,
)
from protocol.view import SignedAnnouncement, pack_view, unpack_view

VOCAB = 99  # the zoo's character tokenizer
TOKENIZER = "f" * 16
LIMITS = Limits(max_bytes=1 << 20, max_tokens=64, max_prompt_tokens=256)
REFUSALS = (RecordError, IntakeRefused, DecodeError)  # the protocol's own ways of saying no


def seed_corpus() -> dict[str, list[bytes]]:
    """Valid encodings of every target's input (what honest peers send)."""
    card = WireCard("qwen2", 310_000, False, TOKENIZER, VOCAB, "transformers", 1.0, 1.0, "0.1")
    wires = []
    for g in (2, 4, 8):
        comps = [WireCompletion([7 + i % 5] * (2 + i % 3) + [5], [-0.5] * (3 + i % 3), "stop", 1) if i % 2 else
                 WireCompletion([8 + i % 4] * 6, [-0.5] * 6, "length", 0) for i in range(g)]  # (cut at 6, end: 5)
        wires.append(WireGroup("digits", "1", "train", 12345 + g, [3, 4, 5, 6, 7], comps, card, step=g,
                               created=1.7e9))
    groups = [encode_group(w) for w in wires]
    summaries = [encode_summary(LengthSummary(g, 8, 6.5, 8.0, 8 * g, 0.25, "qwen2", 3)) for g in (4, 16)]
    ref = BundleRef(bundle_digest(b"x"), 100, 3)
    announcements = [encode_announcement(Announcement(f"Qm{'a' * 44}", ("/ip4/127.0.0.1/tcp/31337",), 7, 1.7e9,
                                                      card, ref, ref, relays)) for relays in ((), ("Qm" + "b" * 44,))]
    bundles = [pack_bundle(groups, 1 << 20)[0], pack_bundle(summaries, 1 << 16)[0], pack_bundle([], 1 << 10)[0],
               pack_bundle2(wires)]
    streams = [b"".join(frame(c.SerializeToString()) for c in bundle_chunks(b, b"sig" * 10, chunk=chunk))
               for b in bundles[:2] for chunk in (64, 4096)]
    requests = [pb.BundleRequest(version=PROTOCOL_VERSION, kind=kind, digest=digest, owner=owner).SerializeToString()
                for kind in ("groups", "summaries", "view", "hello") for digest in (b"", bundle_digest(b"x"))
                for owner in ("", "Qm" + "c" * 44)]
    from hivemind.dht.crypto import RSASignatureValidator
    from hivemind.utils.crypto import RSAPrivateKey

    subkeys = [RSASignatureValidator(RSAPrivateKey()).local_public_key for _ in range(2)]
    return {"request": [frame(r) + frame(b"") for r in requests], "chunks": streams, "bundle": bundles,
            "identity": subkeys,
            "announcement": announcements, "card": groups, "group": groups, "summary": summaries,
            "dht-record": [dht_record_input(a) for a in announcements],
            "view": [pack_view([SignedAnnouncement(b"[owner:" + b"k" * 32 + b"]", a, b"s" * 344)
                                for a in announcements]), pack_view([])]}


def dht_record_input(value: bytes) -> bytes:
    """A DHT sub-record as fuzz input: a byte for the shard (low 6 bits) and whether subkey (64) and value
    (128) arrive serialized, the subkey's length and bytes, an 8-byte expiration offset, the value. The seeds are
    what an honest node stores: an owner-marked subkey in its own shard, both serialized."""
    from protocol.codec import announcement_shard

    subkey = b"[owner:" + b"k" * 32 + b"]"
    return bytes([announcement_shard(subkey) | 64 | 128, len(subkey)]) + subkey + (60).to_bytes(8, "big") + value


# ---- the targets ---------------------------------------------------------------------------------------------
_loop: asyncio.AbstractEventLoop | None = None


def target_request(data: bytes):
    global _loop

    async def read():
        reader = asyncio.StreamReader()
        reader.feed_data(data)
        reader.feed_eof()
        return parse_request(await read_request(reader, 512, 1.0))

    if _loop is None:
        _loop = asyncio.new_event_loop()
    return _loop.run_until_complete(read())


def target_chunks(data: bytes):
    """The bytes as a framed stream of BundleChunk messages, as a puller reads it."""
    assembler = BundleAssembler(b"", 1 << 20, verify=lambda digest, signature: signature == b"sig" * 10)
    pos = 0
    while pos + 9 <= len(data):
        length = int.from_bytes(data[pos + 1: pos + 9], "big")
        piece = data[pos + 9: pos + 9 + min(length, 1 << 20)]
        pos += 9 + len(piece)
        if assembler.add(pb.BundleChunk.FromString(piece)):
            return assembler.bundle()
    return None


_schema: dict = {}


def target_dht_record(data: bytes):
    """The bytes as a DHT sub-record (dht_record_input's layout) stored at one of our nodes; the first byte
    also picks which of subkey and value arrive serialized as hivemind serializes them. RecordError
    "invalid" when the validator refuses it (its answer must be a bool)."""
    from hivemind.dht.protocol import DHTProtocol
    from hivemind.dht.routing import DHTID
    from hivemind.dht.validation import DHTRecord
    from hivemind.utils.timed_storage import get_dht_time

    from node.swarm.dht import _schema_validator, announcement_kind, record_key

    if not _schema:
        _schema["validator"] = _schema_validator("default")
        _schema["keys"] = [DHTID.generate(source=record_key("default", announcement_kind(i))).to_bytes()
                           for i in range(64)]
    if len(data) < 10:
        raise RecordError("short", "not a record")
    n = data[1]
    subkey, rest = data[2: 2 + n], data[2 + n:]
    offset, value = int.from_bytes(rest[:8].ljust(8, b"\0"), "big", signed=True), rest[8:]
    dumps = DHTProtocol.serializer.dumps
    record = DHTRecord(_schema["keys"][data[0] % 64], dumps(subkey) if data[0] & 64 else subkey,
                       dumps(value) if data[0] & 128 else value, get_dht_time() + offset)
    result = _schema["validator"].validate(record)
    if not isinstance(result, bool):
        raise TypeError(f"validator returned {type(result).__name__}")
    if not result:
        raise RecordError("invalid", "refused by the schema")
    return result


def target_identity(data: bytes):
    """The bytes as the DHT subkey an announcement or bundle is signed under: the peer id it owns (what an
    announcement must name, issue 54), and whether it drew an item (what a group must be of)."""
    from node.swarm.dht import peer_id_of
    from protocol.codec import is_drawn

    owned = peer_id_of(data)
    if not isinstance(owned, str) or not isinstance(is_drawn(data, 1.7e9, 12345), bool):
        raise TypeError("peer_id_of / is_drawn returned another type")
    if not owned:
        raise RecordError("identity", "the subkey names no key")
    return owned


def target_group(data: bytes):
    """A group decoded, then checked for padding (boundary.padded) as a receiver does before rebuilding it."""
    from node.swarm.boundary import padded

    wire = decode_group(data, receiver_vocab=VOCAB, limits=LIMITS, tokenizer=TOKENIZER)
    if padded(wire, frozenset({5})):
        raise RecordError("padded", "an end token inside, or cuts of different lengths")
    return wire


TARGETS: dict[str, Callable[[bytes], object]] = {
    "request": target_request,
    "chunks": target_chunks,
    "bundle": lambda data: unpack_groups(data, LIMITS),
    "announcement": lambda data: decode_announcement(data, LIMITS),
    "card": lambda data: peek_card(data, LIMITS),
    "group": target_group,
    "identity": target_identity,
    "summary": lambda data: decode_summary(data, LIMITS),
    "dht-record": target_dht_record,
    "view": unpack_view,
}


def run_target(name: str, data: bytes) -> str:
    """'ok', 'refused:<reason>', or raises what crashed."""
    try:
        TARGETS[name](data)
    except REFUSALS as err:
        return f"refused:{getattr(err, 'reason', type(err).__name__)}"
    return "ok"


# ---- mutations -----------------------------------------------------------------------------------------------
EXTREMES = (b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", b"\x80\x80\x80\x80\x00", b"\x00", b"\x7f")


def mutate(rng: random.Random, data: bytes, corpus: list[bytes]) -> bytes:
    """One to four random edits of a seed (or fresh random bytes, one input in 16)."""
    if rng.random() < 1 / 16:
        return rng.randbytes(rng.randrange(0, 600))
    buf = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(7)
        pos = rng.randrange(len(buf) + 1)
        if op == 0 and buf:  # flip bits
            buf[min(pos, len(buf) - 1)] ^= 1 << rng.randrange(8)
        elif op == 1 and buf:  # set a byte
            buf[min(pos, len(buf) - 1)] = rng.randrange(256)
        elif op == 2:  # cut
            del buf[pos: pos + rng.randrange(1, 64)]
        elif op == 3:  # truncate
            del buf[pos:]
        elif op == 4:  # repeat a slice
            end = min(len(buf), pos + rng.randrange(1, 32))
            buf[pos:pos] = buf[pos:end] * rng.randint(1, 8)
        elif op == 5:  # splice another seed
            other = rng.choice(corpus)
            start = rng.randrange(len(other) + 1)
            buf[pos:pos] = other[start: start + rng.randrange(1, 64)]
        else:  # an extreme varint
            buf[pos:pos] = rng.choice(EXTREMES)
    return bytes(buf[:1 << 16])


def fuzz(name: str, inputs: int, seed: int, report: Callable[[str], None] = print) -> dict:
    rng = random.Random(seed)
    corpus = seed_corpus()[name]
    outcomes: Counter = Counter()
    crashes: list[tuple[bytes, str]] = []
    warm = min(2000, inputs)
    rss_warm = 0.0
    start = time.perf_counter()
    for i in range(inputs):
        if i == warm:
            rss_warm = rss_mb(os.getpid())
        data = rng.choice(corpus) if i < len(corpus) else mutate(rng, rng.choice(corpus), corpus)
        try:
            outcomes[run_target(name, data)] += 1
        except Exception as err:  # noqa: BLE001 (what we are looking for)
            outcomes["CRASH"] += 1
            if len(crashes) < 5:
                crashes.append((data, f"{type(err).__name__}: {err}"))
        if i and i % 100_000 == 0:
            report(f"  {name}: {i}/{inputs} inputs, {outcomes['CRASH']} crashes")
    return {"inputs": inputs, "seconds": time.perf_counter() - start, "outcomes": outcomes, "crashes": crashes,
            "rss_warm": rss_warm or rss_mb(os.getpid()), "rss_end": rss_mb(os.getpid())}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=1_000_000, help="in all, shared equally by the targets")
    parser.add_argument("--targets", default=",".join(TARGETS))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    import logging

    logging.getLogger("hivemind").setLevel(logging.ERROR)  # (its serializer warns on every unknown ext type)
    names = args.targets.split(",")
    unknown = [n for n in names if n not in TARGETS]
    if unknown:
        parser.error(f"unknown target {', '.join(unknown)} (known: {', '.join(TARGETS)})")
    each = max(1, args.inputs // len(names))
    print(f"fuzzing {len(names)} decoders, {each} inputs each (seed {args.seed})", flush=True)
    rows, failed = [], False
    for name in names:
        r = fuzz(name, each, args.seed, report=lambda line: print(line, file=sys.stderr, flush=True))
        ok = r["outcomes"]["ok"]
        refused = sum(v for k, v in r["outcomes"].items() if k.startswith("refused"))
        top = ", ".join(f"{k[8:]} {v}" for k, v in r["outcomes"].most_common() if k.startswith("refused"))[:80]
        grew = r["rss_end"] - r["rss_warm"]
        rows.append(f"| {name} | {r['inputs']} | {ok} | {refused} ({top}) | {r['outcomes']['CRASH']} | "
                    f"{1e6 * r['seconds'] / r['inputs']:.0f} | {grew:+.1f} |")
        failed |= bool(r["outcomes"]["CRASH"]) or grew > 64
        for data, what in r["crashes"]:
            print(f"CRASH {name}: {what}\n  input {data[:200].hex()}", flush=True)
    print("| decoder | inputs | accepted | refused (most common reasons) | crashes | us / input | RSS growth MB |")
    print("|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
