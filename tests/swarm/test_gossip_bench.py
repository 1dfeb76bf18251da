"""The gossip bench's publishers (bench/network/gossip.py) publish what a real receiver takes: valid,
informative groups of items they drew themselves. The bench itself needs root and minutes; this is its
publishing path on the in-memory swarm (it broke silently once, when receivers began refusing items a sender
did not draw)."""
import numpy as np

from bench.attacks import hostile
from bench.network.gossip import valid_groups
from node.config import SwarmConfig
from node.swarm.exchange import GroupExchange
from node.swarm.memory import MemorySwarm
from protocol import ANNOUNCE_SHARDS


def test_the_gossip_benchs_groups_are_taken_by_a_receiver_whole():
    v = hostile.victim_for("tiny-add", "arith-add")
    hub = MemorySwarm()
    cfg = SwarmConfig(name="gossip-bench-test", gather_deadline=0.2, shards_per_step=ANNOUNCE_SHARDS)
    exchanges = {name: GroupExchange(hub.transport(name), cfg, v.tokenizer, v.card, {v.eos_id}, v.task,
                                     max_new_tokens=16) for name in ("publisher", "reader")}
    publisher, reader = exchanges["publisher"], exchanges["reader"]
    groups = valid_groups(v, np.random.default_rng(0), publisher.draw_items(v.task, "train", 5), 16)
    assert publisher.publish(groups, [], 1).published == 5
    reader.prefetch()
    result = reader.gather(32, 64)
    assert len(result.groups) == 5 and not result.rejected and result.uninformative == 0
    assert all(sorted(r.group.rewards) == [0.0] * 4 + [1.0] * 4 for r in result.groups)
