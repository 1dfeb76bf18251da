"""How much of the directory a peer reads while peer sampling fills its view (node/swarm/directory.py): about
READ_BUDGET announcements a step, whatever the swarm's size, so a newcomer's reads stop growing with N."""
from node.config import SwarmConfig
from node.swarm.directory import READ_BUDGET, Directory, rotation_size
from protocol import ANNOUNCE_SHARDS


def test_rotation_size_holds_about_the_budget():
    assert rotation_size(None, 8) == 1  # a shard's fill not known yet: one shard
    assert rotation_size(0.0, 8) == 8  # empty shards (a small swarm): the configured rotation
    assert rotation_size(READ_BUDGET / 4, 8) == 4
    assert rotation_size(READ_BUDGET * 2.5, 8) == 1  # at least one


def read_sizes(per_shard: int, steps: int, view: int = 1) -> list[int]:
    """Shards a gossiping peer whose view holds `view` reads each step when every shard holds `per_shard`."""
    d = Directory(SwarmConfig(), cursor=0, unusable_tokenizer=lambda card: "")
    sizes = []
    for _ in range(steps):
        shards = d.shards_to_read(0.0, known=1, view=view)
        sizes.append(len(shards))
        if shards:
            d.note_read(per_shard * len(shards))
    return sizes


def test_a_filling_view_reads_about_the_budget_a_step_at_any_size():
    # 10,000 peers (156 a shard): one shard, then two steps of rest; 600 peers (9 a shard): 7 shards a step
    assert read_sizes(156, 7) == [1, 0, 0, 1, 0, 0, 1]
    assert read_sizes(9, 4) == [1, 7, 7, 7]
    for per_shard in (2, 9, 40, 156, 1000):  # announcements read per step, on average: at most about the budget
        sizes = read_sizes(per_shard, 60)
        assert sum(sizes) * per_shard / 60 <= 1.5 * READ_BUDGET + per_shard / 60, (per_shard, sizes)
    # a full view: the configured rotation (gossip_shards, by default none); no view, no seed: the whole
    assert read_sizes(156, 3, view=SwarmConfig().pull_peers) == [0, 0, 0]
    d = Directory(SwarmConfig(), cursor=0, unusable_tokenizer=lambda card: "")
    assert len(d.shards_to_read(0.0, known=0, view=0)) == ANNOUNCE_SHARDS
