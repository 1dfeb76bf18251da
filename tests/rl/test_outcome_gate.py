"""The gate on received groups: success-gated takes them only for prompts our own greedy answer gets wrong;
verified-imitation takes those with a completion above our greedy answer's reward, which becomes their baseline."""
import dataclasses

import pytest

from node.config import build_config
from node.generation.rollouts import Completion, Group, Received
from node.models.loading import encode_prompt
from node.peer import Peer
from node.tasks import get_task


@pytest.mark.parametrize("policy", ["success-gated", "verified-imitation"])
def test_received_groups_are_kept_only_where_our_greedy_answer_fails(policy):
    peer = Peer(build_config({"model": {"name": "digit-add"}, "task": {"name": "digits"},
                              "generation": {"max_new_tokens": 48}, "transfer": {"policy": policy}}))
    try:
        task = get_task("digits")
        items = [task.item("train", i) for i in range(12)]
        prompts = [encode_prompt(peer.loaded.tokenizer, item) for item in items]
        greedy, _ = peer.backend.generate(prompts, 1, seed=0, greedy=True)
        said = [peer.loaded.tokenizer.decode(out[0].token_ids, skip_special_tokens=True) for out in greedy]
        # the prompts our greedy completion gets right (we "succeed"; the verifier checks its work too), and
        # every prompt with an answer no completion gives (we fail): only the second kind is kept
        ours = [item for item, text in zip(items, said, strict=True) if task.score(item, text, True) == 1.0]
        wrong = [dataclasses.replace(item, answer="-1") for item in items]
        # each group: one right completion and one wrong (reward 1 and 0, as the verifier would set them)
        groups = [Received(Group(item, encode_prompt(peer.loaded.tokenizer, item),
                                 [Completion([1], [-0.1], "stop", reward=1.0),
                                  Completion([1], [-0.1], "stop", reward=0.0)]), b"s") for item in ours + wrong]
        kept = peer.gate(groups, seed=1)
        assert ours and [r.group.item for r in kept] == wrong
        assert [r.greedy for r in kept] == [0.0] * len(wrong)  # our greedy reward (0 where we fail), kept with it
        if policy == "verified-imitation":  # ... and the baseline of the group's advantages
            assert peer.transfer.advantages([1.0, 0.0], kept[0], 1e-4) == [1.0, 0.0]
    finally:
        peer.close()
