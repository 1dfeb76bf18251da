"""Encoding and strict validation of wire records (no torch, nothing from node/).

Everything decoded here comes from the network and is hostile until checked: the byte budget is enforced
before parsing; version, sizes, types, tokenizer, vocabulary range, completion length (the receiver's own
generation limit), log-probs and length consistency are checked after. A failure raises `RecordError` whose
`reason` is a short stable word for counting.

Behaviour log-probs must be finite, <= 0 and *possible for an honest sampler*: for any sampling distribution
over V tokens, E[exp(surprisal)] = sum_a p(a) / p(a) <= V, so by Markov's inequality a completion's total
surprisal exceeds n * ln(V) + t with probability at most exp(-t), whatever the model, temperature or top-p.
A completion claiming more is refused ("logprob"); with t = 20 an honest one is refused with probability
below 3e-9. This bounds how low a sender can claim its log-probs to be, which is how a sender would inflate
the importance weight (docs/SECURITY.md).

Compact form: token ids in the smallest little-endian width that holds the sender's vocabulary (1-4 bytes),
behaviour log-probs as float16 (2 bytes). Values below float16's range (< -65504) cannot occur for sane
models and are refused; tiny magnitudes keep their relative precision (float16 subnormals reach 6e-8).
"""
from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from dataclasses import dataclass

import msgpack
import numpy as np
from google.protobuf.message import DecodeError

from . import ANNOUNCE_SHARDS, MAX_ANNOUNCEMENT, PROTOCOL_VERSION, SHARD_LEVELS
from . import swarm_pb2 as pb

MAX_BUNDLE = 256  # records in one peer's bundle (a DHT value holds a msgpack list of encoded records)
MAX_VOCAB = 1 << 24  # ids a card may claim: at most 3 bytes each
MAX_CHUNK = 256 * 1024  # bytes of a bundle in one streamed message (hivemind's messages stop at 4 MiB)
FINISH = {"stop": pb.FINISH_STOP, "length": pb.FINISH_LENGTH}
FINISH_NAMES = {v: k for k, v in FINISH.items()}


class RecordError(ValueError):
    """A record that failed validation; `reason` is a short word for per-reason counters."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


@dataclass(frozen=True)
class Limits:
    """The receiver's bounds on what it accepts."""

    max_bytes: int = 3 * 1024 * 1024  # whole record (hivemind's message limit is 4 MiB)
    max_completions: int = 64
    max_tokens: int = 8192  # per completion: a receiver sets its own generation limit (max_new_tokens)
    max_prompt_tokens: int = 8192
    max_text: int = 128  # any string field
    surprisal_slack: float = 20.0  # t of the honest-sampler bound: total surprisal <= n ln V + t


@dataclass
class WireCompletion:
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str  # "stop" | "length"
    reward: float = 0.0  # sender's, informational


@dataclass
class WireCard:
    family: str
    n_params: int
    lora: bool
    tokenizer: str
    vocab_size: int
    backend: str
    temperature: float
    top_p: float
    software: str
    tokenizer_source: str = ""  # how another tokenizer's peer rebuilds ours offline ("zoo:bpe", "hub:<repo>")


@dataclass
class WireGroup:
    task: str
    task_version: str
    split: str
    index: int
    prompt_ids: list[int]
    completions: list[WireCompletion]
    card: WireCard
    step: int = 0
    created: float = 0.0


def id_dtype(vocab_size: int) -> np.dtype:
    """Smallest little-endian unsigned width for ids below vocab_size (3-byte ids use 4 bytes + trim)."""
    if vocab_size <= 1 << 8:
        return np.dtype("<u1")
    if vocab_size <= 1 << 16:
        return np.dtype("<u2")
    return np.dtype("<u4")


def id_width(vocab_size: int) -> int:
    return 3 if (1 << 16) < vocab_size <= MAX_VOCAB else id_dtype(vocab_size).itemsize


def pack_ids(ids, vocab_size: int) -> bytes:
    arr = np.asarray(ids, dtype=np.int64)
    if arr.size and (arr.min() < 0 or arr.max() >= vocab_size):
        raise RecordError("vocab", f"token id outside [0, {vocab_size})")
    if id_width(vocab_size) == 3:
        return arr.astype("<u4").view(np.uint8).reshape(-1, 4)[:, :3].tobytes()
    return arr.astype(id_dtype(vocab_size)).tobytes()


def unpack_ids(data: bytes, vocab_size: int) -> np.ndarray:
    width = id_width(vocab_size)
    if len(data) % width:
        raise RecordError("shape", f"{len(data)} id bytes are not a multiple of {width}")
    if width == 3:
        raw = np.frombuffer(data, dtype=np.uint8).reshape(-1, 3)
        return (raw[:, 0].astype(np.int64) | (raw[:, 1].astype(np.int64) << 8) | (raw[:, 2].astype(np.int64) << 16))
    return np.frombuffer(data, dtype=id_dtype(vocab_size)).astype(np.int64)


def pack_logprobs(logprobs) -> bytes:
    return np.asarray(logprobs, dtype=np.float32).astype("<f2").tobytes()


def unpack_logprobs(data: bytes) -> np.ndarray:
    if len(data) % 2:
        raise RecordError("shape", "odd number of log-prob bytes")
    return np.frombuffer(data, dtype="<f2").astype(np.float32)


def _card_message(card: WireCard) -> pb.ModelCard:
    return pb.ModelCard(family=card.family, n_params=card.n_params, lora=card.lora, tokenizer=card.tokenizer,
                        vocab_size=card.vocab_size, backend=card.backend, temperature=card.temperature,
                        top_p=card.top_p, software=card.software, tokenizer_source=card.tokenizer_source)


def encode_group(group: WireGroup) -> bytes:
    card = group.card
    msg = pb.Group(
        version=PROTOCOL_VERSION, step=group.step, created=group.created,
        task=pb.TaskRef(task=group.task, version=group.task_version, split=group.split, index=group.index),
        prompt_ids=pack_ids(group.prompt_ids, card.vocab_size),
        card=_card_message(card),
    )
    for c in group.completions:
        msg.completions.add(token_ids=pack_ids(c.token_ids, card.vocab_size), logprobs=pack_logprobs(c.logprobs),
                            finish=FINISH[c.finish_reason], reward=c.reward)
    return msg.SerializeToString()


def _decode_card(card: pb.ModelCard, limits: Limits) -> WireCard:
    return WireCard(
        family=_check_text("family", card.family, limits), n_params=card.n_params, lora=card.lora,
        tokenizer=_check_text("tokenizer", card.tokenizer, limits), vocab_size=card.vocab_size,
        backend=_check_text("backend", card.backend, limits), temperature=card.temperature, top_p=card.top_p,
        software=_check_text("software", card.software, limits),
        tokenizer_source=_check_text("tokenizer source", card.tokenizer_source, limits))


def _check_text(name: str, value: str, limits: Limits) -> str:
    if len(value) > limits.max_text:
        raise RecordError("oversize", f"{name} longer than {limits.max_text} characters")
    return value


def _parse(data: bytes, limits: Limits, message_type):
    if not isinstance(data, (bytes, bytearray)):
        raise RecordError("type", f"expected bytes, got {type(data).__name__}")
    if len(data) > limits.max_bytes:
        raise RecordError("oversize", f"{len(data)} bytes > budget {limits.max_bytes}")
    msg = message_type()
    try:
        msg.ParseFromString(bytes(data))
    except DecodeError as err:
        raise RecordError("malformed", str(err) or "protobuf decode error") from None
    if msg.version != PROTOCOL_VERSION:
        raise RecordError("version", f"protocol version {msg.version}, this peer speaks {PROTOCOL_VERSION}")
    return msg


def _decode_completion(c, vocab_size: int, receiver_vocab: int, limits: Limits) -> WireCompletion:
    width = id_width(vocab_size)
    if len(c.token_ids) > limits.max_tokens * width:  # before unpacking: refuse long ones for free
        raise RecordError("length", f"completion of {len(c.token_ids) // width} tokens "
                                    f"> this peer's generation limit {limits.max_tokens}")
    ids = unpack_ids(c.token_ids, vocab_size)
    lps = unpack_logprobs(c.logprobs)
    if ids.size < 1:
        raise RecordError("shape", "empty completion")
    if lps.size != ids.size:
        raise RecordError("shape", f"{ids.size} tokens but {lps.size} log-probs")
    if ids.max() >= receiver_vocab:
        raise RecordError("vocab", f"token id {int(ids.max())} >= vocabulary {receiver_vocab}")
    if not np.isfinite(lps).all():
        raise RecordError("logprob", "non-finite behaviour log-prob")
    if (lps > 0).any():
        raise RecordError("logprob", f"positive behaviour log-prob {float(lps.max())}")
    surprisal, bound = -float(lps.astype(np.float64).sum()), surprisal_bound(ids.size, vocab_size, limits)
    if surprisal > bound:
        raise RecordError("logprob", f"claimed surprisal {surprisal:.1f} nats over {ids.size} tokens: an honest "
                                     f"sampler exceeds {bound:.1f} with probability < exp(-{limits.surprisal_slack:g})")
    if c.finish not in FINISH_NAMES:
        raise RecordError("shape", f"unknown finish reason {c.finish}")
    if not np.isfinite(c.reward):
        raise RecordError("shape", "non-finite reward")
    return WireCompletion(ids.tolist(), lps.tolist(), FINISH_NAMES[c.finish], float(c.reward))


def surprisal_bound(n_tokens: int, vocab_size: int, limits: Limits) -> float:
    """The most total surprisal (nats) an honest sampler's n tokens may claim (see the module docstring)."""
    return n_tokens * math.log(vocab_size) + limits.surprisal_slack


def check_vocab_size(vocab_size: int) -> None:
    """A card's vocabulary must fit the widths ids are packed in (2 .. 2^24 ids)."""
    if not 2 <= vocab_size <= MAX_VOCAB:
        raise RecordError("shape", f"vocabulary size {vocab_size}")


def peek_card(data: bytes, limits: Limits = Limits()) -> WireCard:
    """The model card of a group record, checked as a card (what a receiver needs to choose how to decode the
    rest: its own tokenizer, or another peer's)."""
    return peek(data, limits)[0]


def peek(data: bytes, limits: Limits = Limits()) -> tuple[WireCard, str, str]:
    """(model card, task name, task version) of a group record: what a receiver checks before the rest (a group
    of another task is refused as such, not for its lengths; its card says how to decode it)."""
    msg = _parse(data, limits, pb.Group)
    check_vocab_size(msg.card.vocab_size)
    return (_decode_card(msg.card, limits), _check_text("task", msg.task.task, limits),
            _check_text("task version", msg.task.version, limits))


def decode_group(data: bytes, receiver_vocab: int, limits: Limits = Limits(),
                 tokenizer: str | None = None) -> WireGroup:
    """Parses and validates a group; token ids must fall inside the receiver's vocabulary too.

    tokenizer: the receiver's tokenizer fingerprint; when given, a group from another tokenizer is refused
    ("tokenizer") before its content is looked at, and one that claims ours must also claim our vocabulary."""
    msg = _parse(data, limits, pb.Group)
    card = msg.card
    check_vocab_size(card.vocab_size)
    if tokenizer is not None:
        if card.tokenizer != tokenizer:
            raise RecordError("tokenizer", f"tokenizer {card.tokenizer[:16]!r} is not ours")
        if card.vocab_size != receiver_vocab:
            raise RecordError("shape", f"our tokenizer with a vocabulary of {card.vocab_size}, not {receiver_vocab}")
    if not 2 <= len(msg.completions) <= limits.max_completions:
        raise RecordError("shape", f"group of {len(msg.completions)} completions (2..{limits.max_completions})")
    if len(msg.prompt_ids) > limits.max_prompt_tokens * id_width(card.vocab_size):
        raise RecordError("shape", f"prompt longer than {limits.max_prompt_tokens} tokens")
    prompt = unpack_ids(msg.prompt_ids, card.vocab_size)
    if not prompt.size or prompt.max() >= receiver_vocab:
        raise RecordError("vocab" if prompt.size else "shape", "prompt ids empty or out of vocabulary")
    if msg.task.split not in ("train", "test") or not msg.task.task:
        raise RecordError("task", f"task {msg.task.task!r} split {msg.task.split!r}")
    if not (np.isfinite(msg.created) and np.isfinite(card.temperature) and np.isfinite(card.top_p)):
        raise RecordError("shape", "non-finite number in header")
    completions = [_decode_completion(c, card.vocab_size, receiver_vocab, limits) for c in msg.completions]
    wire_card = _decode_card(card, limits)
    return WireGroup(task=_check_text("task", msg.task.task, limits),
                     task_version=_check_text("task version", msg.task.version, limits), split=msg.task.split,
                     index=msg.task.index, prompt_ids=prompt.tolist(), completions=completions, card=wire_card,
                     step=msg.step, created=msg.created)


def group_identity(group: WireGroup) -> bytes:
    """What a group *is*, independent of the fields a sender can restamp (step, created, rewards, card) and of
    the order of its completions: the task reference, the prompt ids and the set of completion token ids.
    A replayed, re-stamped or re-ordered copy has the same identity, so it is used at most once."""
    digest = hashlib.blake2b(digest_size=16)
    digest.update(f"{group.task}\0{group.task_version}\0{group.split}\0{group.index}\0".encode())
    digest.update(np.asarray(group.prompt_ids, dtype="<u4").tobytes())
    for ids in sorted(np.asarray(c.token_ids, dtype="<u4").tobytes() for c in group.completions):
        digest.update(len(ids).to_bytes(4, "little") + ids)
    return digest.digest()


DRAW_SLOTS = 256  # prompts one identity draws in one second of the swarm's clock (a drawn index's low 8 bits)
_DRAW_BITS = 23  # the rest of a training index (< 2^31): the identity's hash of the second


def _draw_hash(subkey: bytes, stamp: int) -> int:
    digest = hashlib.blake2b(b"swarm-draw/v%d|%d|" % (PROTOCOL_VERSION, stamp) + subkey, digest_size=8).digest()
    return int.from_bytes(digest, "little") & ((1 << _DRAW_BITS) - 1)


def drawn_index(subkey: bytes, stamp: int, slot: int) -> int:
    """The training item index of the `slot`-th prompt the identity `subkey` draws at second `stamp`: what
    binds a group to the peer that generated it. A receiver checks it (`is_drawn`) against the identity whose
    signature the group's bundle carries, so a group re-published by anyone but its generator is refused,
    and a copy kept whole stays its generator's (docs/SECURITY.md, "Defences")."""
    if not 0 <= slot < DRAW_SLOTS:
        raise ValueError(f"slot {slot} outside 0..{DRAW_SLOTS - 1}")
    return _draw_hash(subkey, stamp) << 8 | slot


def is_drawn(subkey: bytes, stamp: float, index: int) -> bool:
    """Whether item `index`, in a group stamped `stamp` (its `created`: the second its prompts were drawn), is
    one the identity `subkey` draws then. A copier that re-signs another's group must find a second within the
    receiver's max age whose hash matches 23 bits of the index: about 180 tries at 2^-23 each, 2e-5 a group."""
    if not (isinstance(stamp, (int, float)) and math.isfinite(stamp) and stamp == int(stamp)):
        return False
    stamp = int(stamp)
    return 0 <= stamp < 1 << 62 and 0 <= index < 1 << 31 and index >> 8 == _draw_hash(subkey, stamp)


@dataclass(frozen=True)
class LengthSummary:
    """What SAGC needs to know about a finished group, small enough to gossip: the node's and the wire's type."""

    group_size: int  # G: completions in the group
    max_len: int  # tokens of the longest completion
    median_len: float  # median completion length in tokens
    mean_len: float
    total_tokens: int  # sum of completion lengths (the useful work)
    gen_seconds: float  # wall time of the generate call that produced the group
    family: str  # model family of the generator, e.g. "qwen2" or "llama"
    step: int = 0  # the generator's training step (a receiver counts one sender's step once)


def encode_summary(s: LengthSummary) -> bytes:
    return pb.LengthSummary(version=PROTOCOL_VERSION, group_size=s.group_size, max_len=s.max_len,
                            median_len=s.median_len, mean_len=s.mean_len, total_tokens=s.total_tokens,
                            gen_seconds=s.gen_seconds, family=s.family, step=s.step).SerializeToString()


def decode_summary(data: bytes, limits: Limits = Limits()) -> LengthSummary:
    msg = _parse(data, Limits(max_bytes=min(limits.max_bytes, 1024)), pb.LengthSummary)
    numbers = (msg.median_len, msg.mean_len, msg.gen_seconds)
    if not all(np.isfinite(x) and x >= 0 for x in numbers):
        raise RecordError("shape", "negative or non-finite summary statistic")
    if not 1 <= msg.group_size <= limits.max_completions or msg.max_len > limits.max_tokens:
        raise RecordError("shape", f"group size {msg.group_size}, max length {msg.max_len}")
    if not msg.median_len <= msg.max_len or msg.total_tokens > msg.group_size * msg.max_len:
        raise RecordError("shape", "inconsistent lengths")
    return LengthSummary(msg.group_size, msg.max_len, msg.median_len, msg.mean_len, msg.total_tokens,
                       msg.gen_seconds, _check_text("family", msg.family, limits), msg.step)


def pack_bundle(records: list[bytes], max_bytes: int) -> tuple[bytes, int]:
    """The longest prefix of records that fits max_bytes, msgpack'd; returns (bundle, records left out)."""
    kept, size = [], 16
    for record in records[:MAX_BUNDLE]:
        if size + len(record) + 8 > max_bytes:
            break
        kept.append(record)
        size += len(record) + 8
    return msgpack.packb(kept, use_bin_type=True), len(records) - len(kept)


def unpack_bundle(data: bytes, max_bytes: int) -> list[bytes]:
    try:
        items = msgpack.unpackb(data, raw=True, max_bin_len=max_bytes, max_array_len=MAX_BUNDLE, max_map_len=0,
                                max_str_len=0, max_ext_len=0)
    except (ValueError, msgpack.UnpackException, TypeError) as err:
        raise RecordError("malformed", f"bundle: {err}") from None
    if not isinstance(items, list) or not all(isinstance(x, bytes) for x in items):
        raise RecordError("malformed", "bundle is not a list of byte strings")
    return items


def bundle_digest(bundle: bytes) -> bytes:
    """What names a bundle in announcements and pull requests: blake2b-128 of its bytes."""
    return hashlib.blake2b(bundle, digest_size=16).digest()


def bundle_statement(kind: str, digest: bytes) -> bytes:
    """What a bundle's owner signs (with the RSA key of its DHT subkey): the bundle's kind and digest."""
    return b"swarm-bundle/v%d|%s|%s" % (PROTOCOL_VERSION, kind.encode(), digest)


def bundle_chunks(bundle: bytes, signature: bytes = b"", chunk: int = MAX_CHUNK) -> list[pb.BundleChunk]:
    """The stream a sender answers a pull with: every chunk carries the total size and digest, the first one
    the owner's signature (one empty chunk for an empty bundle)."""
    pieces = [bundle[i:i + chunk] for i in range(0, len(bundle), chunk)] or [b""]
    named = bundle_digest(bundle)
    chunks = [pb.BundleChunk(version=PROTOCOL_VERSION, total=len(bundle), data=piece, digest=named)
              for piece in pieces]
    chunks[0].signature = signature
    return chunks


BUSY_MARK = b"busy"  # the digest of an empty answer (total 0) that means "served too often, ask later" (a view
#                      bundle: node/swarm SERVES_PER_BUNDLE), not "not served": the puller counts no miss


class BundleAssembler:
    """Joins a pulled stream, refusing it as soon as it breaks a rule: a total above `max_bytes`, a total or
    digest that changes, more data than announced, an empty chunk, a signature that `verify(digest,
    signature)` refuses (the owner's, whoever relays the stream), or (at the end) bytes that do not hash to the
    digest asked for (or, asking for the latest with an empty digest, to the digest the sender names and
    signs)."""

    def __init__(self, digest: bytes, max_bytes: int, verify: Callable[[bytes, bytes], bool] | None = None):
        self.digest, self.max_bytes, self.verify = digest, max_bytes, verify
        self.total: int | None = None
        self.parts: list[bytes] = []
        self.size = 0

    def add(self, chunk: pb.BundleChunk) -> bool:
        """Takes the next chunk; True when the bundle is complete."""
        if chunk.version != PROTOCOL_VERSION:
            raise RecordError("version", f"bundle chunk version {chunk.version}")
        if self.total is None:
            if chunk.total == 0:
                if bytes(chunk.digest) == BUSY_MARK:
                    raise RecordError("busy", "the peer served this bundle as often as it serves one; ask later")
                raise RecordError("missing", "the peer does not serve this bundle")
            if chunk.total > self.max_bytes:
                raise RecordError("oversize", f"bundle of {chunk.total} bytes > {self.max_bytes}")
            if self.digest and bytes(chunk.digest) != self.digest:
                raise RecordError("digest", "the peer sends another bundle than the one asked for")
            if self.verify is not None and not self.verify(bytes(chunk.digest), bytes(chunk.signature)):
                raise RecordError("signature", "the bundle is not signed by the peer that announced it")
            self.total, self.digest = chunk.total, bytes(chunk.digest)
        if (chunk.total != self.total or bytes(chunk.digest) != self.digest or len(chunk.data) > MAX_CHUNK
                or self.size + len(chunk.data) > self.total):
            raise RecordError("malformed", "bundle chunks disagree with the announced size")
        if not chunk.data:  # every chunk of a bundle carries data: empty ones would hold a pull for nothing
            raise RecordError("malformed", "an empty bundle chunk")
        self.parts.append(chunk.data)
        self.size += len(chunk.data)
        return self.size == self.total

    @property
    def complete(self) -> bool:
        return self.total is not None and self.size == self.total

    def bundle(self) -> bytes:
        """The whole bundle, once complete and matching the digest asked for."""
        if self.total is None or self.size != self.total:
            raise RecordError("malformed", f"bundle ended after {self.size} of {self.total} bytes")
        data = b"".join(self.parts)
        if bundle_digest(data) != self.digest:
            raise RecordError("digest", "bundle does not match the digest asked for")
        return data


MAX_MADDRS = 4  # addresses in one announcement
MAX_RELAYS = 2  # relays in one announcement
MAX_CREDITS = 12  # senders credited in one announcement (the most recently used)


@dataclass(frozen=True)
class BundleRef:
    digest: bytes  # blake2b-128 (bundle_digest)
    size: int
    records: int


@dataclass(frozen=True)
class SwarmTask:
    """The task a peer trains on and the settings that must agree with it (a swarm has one task)."""

    name: str
    version: str
    answer_cap: int  # completion length cap in tokens

    def describe(self) -> str:
        return f"{self.name} (answer cap {self.answer_cap})"


@dataclass(frozen=True)
class Announcement:
    peer_id: str
    maddrs: tuple[str, ...]
    step: int
    created: float
    card: WireCard
    groups: BundleRef
    summaries: BundleRef
    relays: tuple[str, ...] = ()  # peer ids that relay pulls to this peer (it cannot accept connections)
    model: str = ""  # the model's name (informational: what `swarm status` shows)
    credits: tuple[tuple[str, int], ...] = ()  # (sender peer id, its groups we trained on in all)
    accuracy: float = -1.0  # its latest held-out ID greedy pass@1, as it claims (-1: not evaluated yet)
    task: SwarmTask | None = None  # the task it trains on (None: an announcement that names none)
    receipts: BundleRef | None = None  # its latest signed receipts (None: none yet)


def _identity_hash(subkey: bytes) -> int:
    """The number an identity's shards are drawn from (its shard at a level: this mod the level's count)."""
    return int.from_bytes(hashlib.blake2b(subkey, digest_size=8).digest(), "little")


def announcement_shard(subkey: bytes, shards: int = ANNOUNCE_SHARDS) -> int:
    """The number of the shard an identity (its DHT subkey) announces in, among `shards` (a level's count: its
    level-0 shard by default; its id at a level is `shard_id(level, number)`)."""
    return _identity_hash(subkey) % shards


def shard_id(level: int, number: int) -> int:
    """The id of shard `number` of level `level` (the levels' shards one after the other)."""
    return sum(SHARD_LEVELS[:level]) + number


def shard_level(shard: int) -> tuple[int, int]:
    """(level, number) of a shard id."""
    for level, count in enumerate(SHARD_LEVELS):
        if shard < count:
            return level, shard
        shard -= count
    raise ValueError("no such shard")


def announcement_shards(subkey: bytes) -> tuple[int, ...]:
    """The ids of the shards an identity announces in, one a level (each within the one of the level above)."""
    number = _identity_hash(subkey)  # (hashed once: every DHT node's validator calls this for each record stored)
    return tuple(shard_id(level, number % count) for level, count in enumerate(SHARD_LEVELS))


def chosen_shards(subkey: bytes, levels) -> tuple[int, ...]:
    """The ids of the identity's shards at these levels (level 0's when none is asked for)."""
    every = announcement_shards(subkey)
    return tuple(every[level] for level in sorted(set(levels))) or every[:1]


def shard_within(shard: int, level: int) -> int:
    """The id of the shard of `level` (at or above the shard's own) that a shard id lies within."""
    own, number = shard_level(shard)
    if level > own:
        raise ValueError("a shard lies within shards of its own level or above")
    return shard_id(level, number % SHARD_LEVELS[level])


def encode_announcement(a: Announcement) -> bytes:
    refs = {name: pb.BundleRef(digest=ref.digest, size=ref.size, records=ref.records)
            for name, ref in (("groups", a.groups), ("summaries", a.summaries))}
    data = pb.Announcement(version=PROTOCOL_VERSION, peer_id=a.peer_id, maddrs=list(a.maddrs), step=a.step,
                           created=a.created, card=_card_message(a.card), relays=list(a.relays), model=a.model,
                           credits=[pb.Credit(peer_id=p, groups=n) for p, n in a.credits[-MAX_CREDITS:]],
                           accuracy=a.accuracy, **refs,
                           **({"task": pb.SwarmTask(name=a.task.name, version=a.task.version,
                                                    answer_cap=a.task.answer_cap)} if a.task else {}),
                           **({"receipts": pb.BundleRef(digest=a.receipts.digest, size=a.receipts.size,
                                                        records=a.receipts.records)} if a.receipts else {}),
                           ).SerializeToString()
    if len(data) > MAX_ANNOUNCEMENT:
        raise ValueError(f"announcement of {len(data)} bytes > {MAX_ANNOUNCEMENT}")
    return data


def _decode_ref(ref: pb.BundleRef, max_bytes: int) -> BundleRef:
    if len(ref.digest) != 16 or not 0 < ref.size <= max_bytes or not 0 <= ref.records <= MAX_BUNDLE:
        raise RecordError("announcement", f"bundle reference ({len(ref.digest)}-byte digest, {ref.size} bytes, "
                                          f"{ref.records} records)")
    return BundleRef(bytes(ref.digest), ref.size, ref.records)


def decode_announcement(data: bytes, limits: Limits = Limits()) -> Announcement:
    """Parses and validates an announcement (size, version, digests, addresses, numbers)."""
    msg = _parse(data, Limits(max_bytes=min(limits.max_bytes, MAX_ANNOUNCEMENT)), pb.Announcement)
    if (not msg.peer_id or len(msg.maddrs) > MAX_MADDRS or len(msg.relays) > MAX_RELAYS
            or len(msg.credits) > MAX_CREDITS or not np.isfinite(msg.created)):
        raise RecordError("announcement", f"peer id {msg.peer_id[:16]!r}, {len(msg.maddrs)} addresses, "
                                          f"{len(msg.relays)} relays, {len(msg.credits)} credits")
    card = msg.card
    if not (2 <= card.vocab_size <= MAX_VOCAB and np.isfinite(card.temperature) and np.isfinite(card.top_p)):
        raise RecordError("announcement", "model card")
    wire_card = _decode_card(card, limits)
    return Announcement(peer_id=_check_text("peer id", msg.peer_id, limits),
                        maddrs=tuple(_check_text("address", m, limits) for m in msg.maddrs), step=msg.step,
                        created=msg.created, card=wire_card, groups=_decode_ref(msg.groups, limits.max_bytes),
                        summaries=_decode_ref(msg.summaries, limits.max_bytes),
                        relays=tuple(_check_text("relay", r, limits) for r in msg.relays),
                        model=_check_text("model name", msg.model, limits),
                        credits=tuple((_check_text("credited peer id", c.peer_id, limits), c.groups)
                                      for c in msg.credits if c.peer_id != msg.peer_id),  # never itself
                        accuracy=msg.accuracy if 0.0 <= msg.accuracy <= 1.0 else -1.0,  # (NaN: not in range)
                        task=SwarmTask(_check_text("task", msg.task.name, limits),
                                       _check_text("task version", msg.task.version, limits), msg.task.answer_cap)
                        if msg.HasField("task") and msg.task.name else None,
                        receipts=_decode_ref(msg.receipts, limits.max_bytes) if msg.HasField("receipts") else None)
