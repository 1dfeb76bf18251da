"""How much of the directory a peer reads while peer sampling fills its view (node/swarm/directory.py): about
READ_BUDGET announcements a step, whatever the swarm's size, so a newcomer's reads stop growing with N; and no
single read larger than FINE_ABOVE announcements up to 100,000 peers (the fine shards)."""
from node.config import SwarmConfig
from node.swarm.directory import (
    ESTIMATE_EVERY,
    FINE_ABOVE,
    READ_BUDGET,
    RESCUE_HELPING,
    RESCUE_STEPS,
    Directory,
    covered,
    next_level,
    rotation_size,
)
from protocol import ANNOUNCE_SHARDS, FINE_SHARDS


def test_rotation_size_holds_about_the_budget():
    assert rotation_size(None, 8) == 1  # a shard's fill not known yet: one shard
    assert rotation_size(0.0, 8) == 8  # empty shards (a small swarm): the configured rotation
    assert rotation_size(READ_BUDGET / 4, 8) == 4
    assert rotation_size(READ_BUDGET * 2.5, 8) == 1  # at least one


def test_the_level_follows_how_full_a_coarse_shard_is_with_no_flapping():
    assert next_level(False, FINE_ABOVE + 1) and not next_level(False, FINE_ABOVE)
    assert next_level(True, READ_BUDGET) and not next_level(True, READ_BUDGET - 1)
    middle = (READ_BUDGET + FINE_ABOVE) / 2  # between the two thresholds: the level stays
    assert next_level(True, middle) and not next_level(False, middle)


def test_the_share_of_the_directory_a_set_of_coarse_and_fine_shards_covers():
    fine = [ANNOUNCE_SHARDS + j for j in range(FINE_SHARDS)]  # fine shard j lies within coarse shard j % 64
    assert covered(set()) == 0.0 and covered(range(ANNOUNCE_SHARDS)) == 1.0 and covered(fine) == 1.0
    assert covered({0, 1}) == 2 / ANNOUNCE_SHARDS
    assert covered({0, fine[0], fine[ANNOUNCE_SHARDS], fine[1]}) == 1 / ANNOUNCE_SHARDS + 1 / FINE_SHARDS


def reads(peers: int, steps: int, view: int = 1) -> list[tuple[int, bool, float]]:
    """(shards, fine, announcements) a gossiping peer whose view holds `view` reads each step in a swarm of
    `peers` (every shard holding its expected share)."""
    d = Directory(SwarmConfig(), cursor=0, unusable_tokenizer=lambda card: "")
    out = []
    for _ in range(steps):
        shards = d.shards_to_read(0.0, known=1, view=view)
        fine = bool(shards) and shards[0] >= ANNOUNCE_SHARDS
        assert all((s >= ANNOUNCE_SHARDS) == fine for s in shards)  # one level a read
        got = len(shards) * peers / (FINE_SHARDS if fine else ANNOUNCE_SHARDS)
        out.append((len(shards), fine, got))
        if shards:
            d.note_read(round(got))
    return out


def test_a_filling_view_reads_about_the_budget_a_step_at_any_size():
    # 10,000 peers: a coarse shard holds 156, a fine one 9.8: one fine shard a step (READ_BUDGET is 16)
    assert [(n, f) for n, f, _ in reads(10_000, 4)] == [(1, True)] * 4
    # 100 peers (1.6 a coarse shard): one fine shard, then 8 fine ones show the coarse shards are small, which
    # it then reads, more a step as the estimate firms up
    assert [(n, f) for n, f, _ in reads(100, 6)] == [(1, True), (8, True), (1, False), (2, False), (4, False),
                                                     (5, False)]
    for peers in (5, 100, 600, 1_500, 3_000, 5_000, 8_000, 10_000, 30_000, 100_000):
        got = [a for _, _, a in reads(peers, 60)]
        assert max(got) <= max(FINE_ABOVE, peers / FINE_SHARDS), (peers, max(got))  # flat up to 32,000 peers
        assert sum(got) / 60 <= 1.5 * READ_BUDGET, (peers, got)  # about the budget a step, on average
    # a full view: the configured rotation (gossip_shards, by default none); no view, no seed: the whole
    assert [n for n, _, _ in reads(10_000, 3, view=SwarmConfig().pull_peers)] == [0, 0, 0]
    d = Directory(SwarmConfig(), cursor=0, unusable_tokenizer=lambda card: "")
    assert d.shards_to_read(0.0, known=0, view=0) == list(range(ANNOUNCE_SHARDS))


def test_a_peer_writes_the_records_that_readers_at_its_swarm_size_read():
    """Its reads estimate the swarm's size; in a large swarm it writes only its fine record (no DHT node holding
    a coarse shard takes N / 64 stores a step), in a small one only its coarse one (one store a step, as before
    the fine shards), both between; a full view still reads one fine shard every ESTIMATE_EVERY steps, so the
    estimate follows the swarm as it shrinks."""
    full = SwarmConfig().pull_peers
    for peers, coarse, fine in ((100, True, False), (1_000, True, True), (10_000, False, True),
                                (100_000, False, True)):
        d = Directory(SwarmConfig(), cursor=0, unusable_tokenizer=lambda card: "")
        assert d.writes_coarse() and not d.writes_fine() and d.size() is None  # nothing read yet: the coarse one
        for _ in range(3):
            shards = d.shards_to_read(0.0, known=1, view=1)
            if shards:
                d.note_read(round(peers * covered(shards)))
        assert (d.writes_coarse(), d.writes_fine()) == (coarse, fine), (peers, d.size())
        assert abs(d.size() - peers) <= 0.1 * peers or abs(d.size() - peers) < 30, (peers, d.size())
    # the 10,000-peer swarm shrinks to 100: the full view's occasional fine reads bring the coarse record back
    d = Directory(SwarmConfig(), cursor=0, unusable_tokenizer=lambda card: "")
    d.note_read(0)  # (nothing started: no effect)
    d.reading = d.rotation(8, fine=True)
    d.note_read(round(10_000 * covered(d.reading)))
    assert not d.writes_coarse()
    reads = []
    for _ in range(40 * ESTIMATE_EVERY):
        shards = d.shards_to_read(0.0, known=full, view=full)
        if shards:
            reads.append(shards)
            d.note_read(1 if len(reads) % 10 == 0 else 0)  # one fine shard of 100 peers: about 0.1
    assert all(len(r) == 1 and r[0] >= ANNOUNCE_SHARDS for r in reads) and len(reads) == 40, reads[:3]
    assert d.writes_coarse(), d.size()


def test_a_read_that_found_nothing_by_chance_is_not_followed_by_a_whole_rotation_of_full_shards():
    d = Directory(SwarmConfig(), cursor=0, unusable_tokenizer=lambda card: "")
    d.shards_to_read(0.0, known=1, view=1)
    d.note_read(0)  # one fine shard of an 8,000-peer swarm (7.8 on average) that happened to hold none
    shards = d.shards_to_read(0.0, known=1, view=1)
    assert min(shards) >= ANNOUNCE_SHARDS and len(shards) <= SwarmConfig().shards_per_step, shards  # fine ones
    d.note_read(round(8_000 * covered(shards)))  # (62: not 8 coarse shards, 1,000)
    later = [d.shards_to_read(0.0, known=1, view=1) for _ in range(4)]  # (after a rest: 62 // READ_BUDGET)
    assert d.fine and [len(r) for r in later] == [0, 0, 0, 1] and later[-1][0] >= ANNOUNCE_SHARDS, later


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
