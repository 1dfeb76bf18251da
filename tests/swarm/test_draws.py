"""A peer's training items drawn from its identity and the second (node/swarm/draws.py, protocol drawn_index and
is_drawn): exact values, slots handed out in order across steps, and a copier's odds."""
import hashlib
import random

import pytest

from node.swarm.draws import Draws
from node.tasks import get_task
from protocol import PROTOCOL_VERSION
from protocol.codec import DRAW_SLOTS, drawn_index, is_drawn

ME, OTHER = b"[owner:me]", b"[owner:other]"


def test_a_drawn_index_is_the_identitys_hash_of_the_second_and_the_slot():
    digest = hashlib.blake2b(b"swarm-draw/v%d|%d|" % (PROTOCOL_VERSION, 1_800_000_000) + ME, digest_size=8).digest()
    expected = (int.from_bytes(digest, "little") & ((1 << 23) - 1)) << 8 | 7
    assert drawn_index(ME, 1_800_000_000, 7) == expected < 2**31  # a training index (below HELD_OUT_START)
    with pytest.raises(ValueError):
        drawn_index(ME, 1_800_000_000, DRAW_SLOTS)


def test_only_the_drawing_identity_at_that_second_drew_it():
    index = drawn_index(ME, 1_800_000_000, 3)
    assert is_drawn(ME, 1_800_000_000.0, index) and is_drawn(ME, 1_800_000_000, index)
    assert not is_drawn(OTHER, 1_800_000_000.0, index)  # another identity: a copy
    assert not is_drawn(ME, 1_800_000_001.0, index)  # re-stamped
    assert not is_drawn(ME, 1_800_000_000.5, index)  # not a whole second
    assert not any(is_drawn(ME, stamp, index) for stamp in (float("nan"), float("inf"), -1.0, 2.0**70))
    assert not is_drawn(ME, 1_800_000_000.0, index + 2**31)  # (a held-out index is never drawn)


def test_slots_are_handed_out_in_order_and_a_full_second_moves_to_the_next():
    draws = Draws(ME)
    first = draws.indices(4, now=1_800_000_000.3)
    again = draws.indices(4, now=1_800_000_000.9)  # a second step within the same second: the next slots
    assert first == [drawn_index(ME, 1_800_000_000, s) for s in range(4)]
    assert again == [drawn_index(ME, 1_800_000_000, s) for s in range(4, 8)]
    many = draws.indices(300, now=1_800_000_000.95)  # 248 left in this second, then the next one's
    assert many[:248] == [drawn_index(ME, 1_800_000_000, s) for s in range(8, 256)]
    assert many[248:] == [drawn_index(ME, 1_800_000_001, s) for s in range(52)]
    assert draws.stamp_of(many[-1]) == 1_800_000_001 and draws.stamp_of(first[0]) == 1_800_000_000
    later = draws.indices(1, now=1_800_000_005.0)  # the clock moved on: its second, from slot 0
    assert later == [drawn_index(ME, 1_800_000_005, 0)]
    with pytest.raises(KeyError):
        draws.stamp_of(12345)  # not ours


def test_draws_give_the_tasks_training_items():
    task = get_task("arith")
    items = Draws(ME).items(task, "train", 3, now=1_800_000_000.0)
    assert [i.ref.index for i in items] == [drawn_index(ME, 1_800_000_000, s) for s in range(3)]
    assert items[0] == task.item("train", items[0].ref.index)


def test_a_copier_that_re_signs_rarely_finds_a_second_that_draws_a_stolen_index():
    """A copier must claim a second within the receiver's max age and clock skew (about 180) whose 23-bit hash
    matches the stolen index's: at 2^-23 a try, none of 2,000 stolen indices in 180 seconds each."""
    rng = random.Random(0)
    stolen = [drawn_index(ME, 1_800_000_000 + rng.randrange(100), rng.randrange(DRAW_SLOTS)) for _ in range(2000)]
    found = sum(any(is_drawn(OTHER, 1_800_000_000 + t, index) for t in range(180)) for index in stolen)
    assert found == 0
