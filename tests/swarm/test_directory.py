"""How much of the directory a peer reads while peer sampling fills its view (node/swarm/directory.py): about
READ_BUDGET announcements a step, whatever the swarm's size, so a newcomer's reads stop growing with N; no single
read larger than READ_BUDGET announcements up to 65,000 peers (the shard levels); and a reader's columns hold
every writer whose estimate of the swarm's size is within 2x of the reader's."""
from node.config import SwarmConfig
from node.swarm.directory import (
    ESTIMATE_EVERY,
    FANOUT,
    READ_BUDGET,
    RESCUE_HELPING,
    RESCUE_STEPS,
    Directory,
    covered,
    read_levels,
    read_plan,
    rotation_size,
    write_level,
)
from protocol import ANNOUNCE_SHARDS, SHARD_LEVELS
from protocol.codec import shard_id, shard_level, shard_within


def test_rotation_size_holds_about_the_budget():
    assert rotation_size(None, 8) == 1  # a shard's fill not known yet: one shard
    assert rotation_size(0.0, 8) == 8  # empty shards (a small swarm): the configured rotation
    assert rotation_size(READ_BUDGET / 4, 8) == 4
    assert rotation_size(READ_BUDGET * 2.5, 8) == 1  # at least one


def test_readers_find_every_writer_whose_estimate_is_within_2x_of_theirs():
    assert SHARD_LEVELS == (64, 256, 1024, 4096) and FANOUT == 4
    assert [write_level(n) for n in (0, 255, 256, 1023, 1024, 4095, 4096, 10**6)] == [0, 0, 1, 1, 2, 2, 3, 3]
    assert [read_plan(n) for n in (0, 127, 128, 511, 512, 2047, 2048, 8191, 8192, 10**6)] == [
        (0, False), (0, False), (0, True), (0, True), (1, True), (1, True), (2, True), (2, True), (3, False),
        (3, False)]
    for writers in range(1, 200_000, 37):  # a reader's estimate from half to twice the writers'
        for reader in (writers / 2, writers, 1.5 * writers, 2 * writers):
            assert write_level(writers) in read_levels(read_plan(reader)), (writers, reader)


def test_the_share_of_the_directory_a_set_of_shards_of_any_level_covers():
    for level, count in enumerate(SHARD_LEVELS):
        assert covered({shard_id(level, j) for j in range(count)}) == 1.0
    assert covered(set()) == 0.0 and covered({0, 1}) == 2 / ANNOUNCE_SHARDS
    within = {shard_id(1, 0), shard_id(1, 64), shard_id(2, 0), shard_id(2, 1)}  # within shard 0 or level-1 shard 1
    assert covered({0, shard_id(1, 1), *within, shard_id(2, 65)}) == 1 / 64 + 1 / 256 + 1 / 1024
    column = Directory(SwarmConfig(), cursor=5, unusable_tokenizer=lambda card: "").rotation(1, 1, column=True)
    assert len(column) == 1 + FANOUT and covered(column) == 1 / 256  # a shard and the 4 of the next level in it
    assert all(shard_within(s, 1) == column[0] for s in column[1:])


def reads(peers: int, steps: int, view: int = 1) -> list[tuple[int, tuple[int, ...], float]]:
    """(shards, their levels, announcements) a gossiping peer whose view holds `view` reads each step in a swarm
    of `peers` (every shard holding its expected share of the writers at its level, a column all of its part)."""
    d = Directory(SwarmConfig(), cursor=0, unusable_tokenizer=lambda card: "")
    out = []
    for _ in range(steps):
        plan = d.plan
        shards = d.shards_to_read(0.0, known=1, view=view)
        levels = tuple(sorted({shard_level(s)[0] for s in shards}))
        assert not shards or set(levels) <= set(read_levels(plan)), (plan, shards)  # one plan a read
        got = peers * covered(shards)
        out.append((len(shards), levels, got))
        if shards:
            d.note_read(round(got))
    return out


def test_a_filling_view_reads_about_the_budget_a_step_at_any_size():
    # 10,000 peers: a shard holds 156, 39, 9.8 and 2.4 at the four levels: the finest, more shards a step as the
    # estimate firms up
    assert [(n, levels) for n, levels, _ in reads(10_000, 4)] == [(1, (3,)), (2, (3,)), (3, (3,)), (3, (3,))]
    # 100 peers (1.6 a level-0 shard): one finest shard, 8 more, all but empty: the estimate falls, and columns
    # of levels 1-2, then 0-1, hold the writers (all at level 0) whose estimates are within 2x of ours
    assert [(n, levels) for n, levels, _ in reads(100, 6)] == [(1, (3,)), (8, (3,)), (10, (1, 2)), (10, (1, 2)),
                                                               (10, (0, 1)), (10, (0, 1))]
    for peers in (5, 100, 300, 600, 1_500, 3_000, 5_000, 8_000, 10_000, 30_000, 65_000, 100_000):
        got = [a for _, _, a in reads(peers, 60)]
        assert max(got) <= max(READ_BUDGET, peers / SHARD_LEVELS[-1]), (peers, max(got))  # flat up to 65,000
        assert sum(got) / 60 <= READ_BUDGET, (peers, got)  # at most the budget a step, on average
    # a full view: the configured rotation (gossip_shards, by default none); no view, no seed: the whole
    assert [n for n, _, _ in reads(10_000, 3, view=SwarmConfig().pull_peers)] == [0, 0, 0]
    d = Directory(SwarmConfig(), cursor=0, unusable_tokenizer=lambda card: "")
    assert d.shards_to_read(0.0, known=0, view=0) == list(range(ANNOUNCE_SHARDS))


def test_a_peer_writes_one_level_the_one_its_swarm_size_calls_for():
    """Its reads estimate the swarm's size; it writes at one level, whose shards hold fewer than FANOUT
    announcements at that size (no DHT node holding a shard takes more than about 4 stores of it a step, and every
    peer stores one record a step); a full view still reads one unit every ESTIMATE_EVERY steps, so the estimate
    follows the swarm as it shrinks."""
    full = SwarmConfig().pull_peers
    for peers, level in ((100, 0), (1_000, 1), (3_000, 2), (10_000, 3), (100_000, 3)):
        d = Directory(SwarmConfig(), cursor=0, unusable_tokenizer=lambda card: "")
        assert d.writes() == (0,) and d.size() is None  # nothing read yet: level 0
        for _ in range(8):
            shards = d.shards_to_read(0.0, known=1, view=1)
            if shards:
                d.note_read(round(peers * covered(shards)))
        assert d.writes() == (level,), (peers, d.size())
        assert abs(d.size() - peers) <= 0.15 * peers or abs(d.size() - peers) < 30, (peers, d.size())
    # the 10,000-peer swarm shrinks to 100: the full view's occasional reads bring level 0 back
    d = Directory(SwarmConfig(), cursor=0, unusable_tokenizer=lambda card: "")
    d.note_read(0)  # (nothing started: no effect)
    d.reading = d.rotation(8, 3)
    d.note_read(round(10_000 * covered(d.reading)))
    assert d.writes() == (3,)
    reads, carry = [], 0.0
    for _ in range(40 * ESTIMATE_EVERY):
        shards = d.shards_to_read(0.0, known=full, view=full)
        if shards:
            reads.append(shards)
            carry += 100 * covered(shards)  # (a part of 100 peers holds its share on average)
            d.note_read(int(carry))
            carry -= int(carry)
    assert all(len(r) in (1, 1 + FANOUT) for r in reads) and len(reads) == 40, reads[:3]  # one unit each time
    assert d.writes() == (0,) and shard_level(reads[-1][0])[0] == 0, (d.size(), reads[-3:])


def test_a_read_that_found_nothing_by_chance_is_not_followed_by_a_whole_rotation_of_full_shards():
    d = Directory(SwarmConfig(), cursor=0, unusable_tokenizer=lambda card: "")
    d.shards_to_read(0.0, known=1, view=1)
    d.note_read(0)  # one finest shard of an 8,000-peer swarm (2 on average) that happened to hold none
    got = []
    for _ in range(6):
        shards = d.shards_to_read(0.0, known=1, view=1)
        got.append(round(8_000 * covered(shards)))
        if shards:
            d.note_read(got[-1])
    assert 0 < max(got) <= READ_BUDGET, got  # (not 8 shards of level 0: 1,000)


def test_a_newcomer_whose_full_view_brings_no_helpful_sender_keeps_reading_for_a_while():
    """Seeds that fill a newcomer's view with identities whose groups teach nothing (Sybils) do not stop its
    budgeted reads: they go on while fewer than RESCUE_HELPING senders brought it informative groups, for its
    first RESCUE_STEPS steps; a peer that such senders help reads nothing once its view is full."""
    full = SwarmConfig().pull_peers
    d = Directory(SwarmConfig(), cursor=0, unusable_tokenizer=lambda card: "")
    sizes = []
    for _ in range(RESCUE_STEPS + 5):
        shards = d.shards_to_read(0.0, known=full, view=full, helping=0)
        sizes.append(len(shards))
        if shards:
            d.note_read(round(100 * covered(shards)))
    assert all(sizes[:RESCUE_STEPS]) and not any(sizes[RESCUE_STEPS:]), sizes
    d = Directory(SwarmConfig(), cursor=0, unusable_tokenizer=lambda card: "")
    assert d.shards_to_read(0.0, known=full, view=full, helping=RESCUE_HELPING) == []
