"""Wire protocol: schema in sync, exact round trips, compact size, and hostile records refused."""
import math

import numpy as np
import pytest

from protocol import PROTOCOL_VERSION
from protocol import swarm_pb2 as pb
from protocol.codec import (
    MAX_CREDITS,
    Announcement,
    BundleRef,
    LengthSummary,
    Limits,
    RecordError,
    WireCard,
    WireCompletion,
    WireGroup,
    decode_announcement,
    decode_group,
    decode_summary,
    encode_announcement,
    encode_group,
    encode_summary,
    pack_ids,
    unpack_ids,
)


def card(vocab=99):
    return WireCard("qwen2", 310000, False, "abc123", vocab, "transformers", 1.0, 1.0, "0.1.0")


def group(g=4, t=5, vocab=99, seed=0):
    rng = np.random.default_rng(seed)
    comps = [WireCompletion(rng.integers(0, vocab, t).tolist(), (-rng.exponential(1.0, t)).tolist(), "stop", 1.0)
             for _ in range(g)]
    return WireGroup("arith", "1", "train", 7, [5, 6, 7], comps, card(vocab), step=3, created=1000.5)


@pytest.mark.parametrize("proto, module", [("swarm.proto", "swarm_pb2"), ("control.proto", "control_pb2")])
def test_schema_and_generated_code_agree(tmp_path, proto, module):
    import importlib

    from google.protobuf import descriptor_pb2
    from grpc_tools import protoc

    from protocol.build import HERE

    out = tmp_path / "set.pb"
    assert protoc.main(["protoc", f"-I{HERE}", f"--descriptor_set_out={out}", str(HERE / proto)]) == 0
    fresh = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file[0]
    for message in fresh.message_type:  # descriptor sets carry json names; generated modules do not
        for f in message.field:
            f.ClearField("json_name")
        for nested in message.nested_type:
            for f in nested.field:
                f.ClearField("json_name")
    generated = importlib.import_module(f"protocol.{module}").DESCRIPTOR.serialized_pb
    assert fresh == descriptor_pb2.FileDescriptorProto.FromString(generated)


@pytest.mark.parametrize("vocab, width", [(99, 1), (49152, 2), (151646, 3), (1 << 24, 3)])
def test_ids_round_trip_in_the_smallest_width(vocab, width):
    ids = [0, 1, vocab - 1, vocab // 2]
    data = pack_ids(ids, vocab)
    assert len(data) == width * len(ids) and unpack_ids(data, vocab).tolist() == ids


def test_group_round_trip():
    g = group()
    back = decode_group(encode_group(g), receiver_vocab=99)
    assert back.prompt_ids == g.prompt_ids and (back.task, back.split, back.index) == ("arith", "train", 7)
    assert back.card == g.card and back.step == 3 and back.created == 1000.5
    for a, b in zip(g.completions, back.completions, strict=True):
        assert a.token_ids == b.token_ids and a.finish_reason == b.finish_reason
        # float16: relative error below 2^-11
        assert all(abs(x - y) <= 2 ** -11 * abs(x) + 1e-7 for x, y in zip(a.logprobs, b.logprobs, strict=True))


@pytest.mark.parametrize("vocab, bound", [(99, 3.02), (49152, 4.02), (151646, 5.02)])
def test_bytes_per_shared_token(vocab, bound):
    g = group(g=16, t=2048, vocab=vocab)
    per_token = len(encode_group(g)) / (16 * 2048)
    assert per_token <= bound  # the F-TIS paper sends 8 (int32 + float32)


def hostile(mutate):
    msg = pb.Group.FromString(encode_group(group()))
    mutate(msg)
    return msg.SerializeToString()


@pytest.mark.parametrize("mutate, reason", [
    (lambda m: setattr(m, "version", PROTOCOL_VERSION + 1), "version"),
    (lambda m: setattr(m.completions[0], "logprobs", np.array([np.nan] * 5, "<f2").tobytes()), "logprob"),
    (lambda m: setattr(m.completions[1], "logprobs", np.array([0.5] * 5, "<f2").tobytes()), "logprob"),
    (lambda m: setattr(m.completions[0], "logprobs", np.array([-1.0] * 4, "<f2").tobytes()), "shape"),
    (lambda m: setattr(m.completions[0], "token_ids", bytes([98, 99, 120, 1, 2])), "vocab"),
    (lambda m: setattr(m, "prompt_ids", b""), "shape"),
    (lambda m: setattr(m.task, "split", "dev"), "task"),
    (lambda m: setattr(m.card, "family", "x" * 1000), "oversize"),
    (lambda m: setattr(m.completions[0], "finish", 0), "shape"),
    (lambda m: [m.completions.pop() for _ in range(3)], "shape"),
])
def test_hostile_records_are_refused_with_a_reason(mutate, reason):
    with pytest.raises(RecordError) as err:
        decode_group(hostile(mutate), receiver_vocab=99)
    assert err.value.reason == reason


def test_oversize_and_garbage_are_refused_before_parsing():
    data = encode_group(group(g=16, t=2048))
    with pytest.raises(RecordError, match="oversize"):
        decode_group(data, receiver_vocab=99, limits=Limits(max_bytes=len(data) - 1))
    with pytest.raises(RecordError, match="malformed"):
        decode_group(b"\xff\xff\xff\xff", receiver_vocab=99)
    with pytest.raises(RecordError, match="type"):
        decode_group("text", receiver_vocab=99)


def test_receiver_vocabulary_bounds_ids():
    with pytest.raises(RecordError, match="vocab"):
        decode_group(encode_group(group(vocab=99)), receiver_vocab=50)


def test_unknown_fields_are_ignored():
    data = encode_group(group()) + bytes([0xF8, 0x01, 0x05])  # field 31, varint 5: from a later version
    assert decode_group(data, receiver_vocab=99).index == 7


def test_summary_round_trip_and_checks():
    s = LengthSummary(8, 40, 10.0, 12.5, 100, 0.25, "qwen2", 4)
    assert decode_summary(encode_summary(s)) == s
    bad = pb.LengthSummary.FromString(encode_summary(s))
    bad.total_tokens = 10_000
    with pytest.raises(RecordError, match="inconsistent"):
        decode_summary(bad.SerializeToString())
    bad.total_tokens, bad.mean_len = 100, math.inf
    with pytest.raises(RecordError, match="non-finite"):
        decode_summary(bad.SerializeToString())


def test_completions_longer_than_the_receivers_limit_are_refused_before_unpacking():
    data = encode_group(group(t=9))
    assert len(decode_group(data, receiver_vocab=99, limits=Limits(max_tokens=9)).completions[0].token_ids) == 9
    with pytest.raises(RecordError) as err:
        decode_group(data, receiver_vocab=99, limits=Limits(max_tokens=8))
    assert err.value.reason == "length"


@pytest.mark.parametrize("vocab", [99, 49152])
def test_the_honest_sampler_surprisal_bound_is_exact(vocab):
    """Total claimed surprisal of n tokens may reach n ln V + 20 and not more (Markov on E[1/p] <= V)."""
    n, limits = 6, Limits()
    bound = n * math.log(vocab) + limits.surprisal_slack
    ok = group(vocab=vocab)
    for c in ok.completions:
        c.token_ids, c.logprobs = [1] * n, [-(bound - 0.05) / n] * n  # float16 rounds within 0.05 here
    assert len(decode_group(encode_group(ok), receiver_vocab=vocab).completions) == 4
    ok.completions[2].logprobs = [-(bound + 0.2) / n] * n
    with pytest.raises(RecordError, match="claimed surprisal") as err:
        decode_group(encode_group(ok), receiver_vocab=vocab)
    assert err.value.reason == "logprob"


def test_a_foreign_tokenizer_is_named_as_such_and_ours_must_claim_our_vocabulary():
    data = encode_group(group(vocab=49152))  # ids that the 99-token receiver could never unpack
    with pytest.raises(RecordError) as err:
        decode_group(data, receiver_vocab=99, tokenizer="ours")
    assert err.value.reason == "tokenizer"
    g = group(vocab=120)
    g.card.tokenizer = "ours"
    with pytest.raises(RecordError, match="vocabulary of 120") as err:
        decode_group(encode_group(g), receiver_vocab=99, tokenizer="ours")
    assert err.value.reason == "shape"


def test_a_group_is_what_it_contains():
    from protocol.codec import group_identity

    g = group()
    same = group()
    same.step, same.created = 99, 5.0  # re-stamped
    same.completions = list(reversed(same.completions))  # re-ordered
    same.completions[0].reward, same.completions[0].logprobs = 0.0, [-9.0] * 5  # other claims
    assert group_identity(g) == group_identity(same)
    other = group()
    other.completions[1].token_ids = other.completions[1].token_ids[:-1] + [98]
    assert group_identity(other) != group_identity(g)
    moved = group()
    moved.index = 8
    assert group_identity(moved) != group_identity(g)


def test_an_announcement_carries_model_and_credits_but_never_self_credit():
    ref = BundleRef(b"\1" * 16, 10, 1)
    credits = (("QmOther", 7), ("QmMe", 99))
    back = decode_announcement(encode_announcement(Announcement("QmMe", (), 3, 1.0, card(), ref, ref,
                                                                model="digit-add", credits=credits)))
    assert back.model == "digit-add" and back.credits == (("QmOther", 7),)  # its credit to itself dropped
    many = tuple((f"Qm{i}", i) for i in range(MAX_CREDITS + 5))
    kept = decode_announcement(encode_announcement(Announcement("QmMe", (), 3, 1.0, card(), ref, ref,
                                                                credits=many))).credits
    assert kept == many[-MAX_CREDITS:]  # the most recently used senders
    msg = pb.Announcement.FromString(encode_announcement(Announcement("QmMe", (), 3, 1.0, card(), ref, ref)))
    msg.credits.extend(pb.Credit(peer_id=f"Qm{i}", groups=1) for i in range(MAX_CREDITS + 1))
    with pytest.raises(RecordError, match="credits"):
        decode_announcement(msg.SerializeToString())


def test_the_largest_announcement_fits_its_limit():
    """Every field at its bound (4 long addresses, 2 relays, MAX_CREDITS credits, a 64-character model name:
    node/models/loading.py DISPLAY_NAME) stays under MAX_ANNOUNCEMENT, so a peer never fails to announce."""
    from protocol import MAX_ANNOUNCEMENT

    peer_id = "12D3KooW" + "x" * 44
    wide = WireCard("q" * 24, 10**9, True, "f" * 64, 262144, "transformers", 1.0, 1.0, "s" * 32, "hub:" + "r" * 96)
    ref = BundleRef(b"1" * 16, 3 << 20, 256)
    biggest = Announcement(peer_id, tuple(f"/ip6/{'a' * 39}/tcp/31330/p2p/{peer_id}" for _ in range(4)), 10**9,
                           1e9, wide, ref, ref, relays=(peer_id, peer_id), model="m" * 64,
                           credits=tuple((peer_id, 10**9) for _ in range(MAX_CREDITS)), accuracy=0.5)
    assert len(encode_announcement(biggest)) <= MAX_ANNOUNCEMENT
