"""The outcome variant's gate: other peers' groups are taken only for prompts our own greedy answer gets wrong."""
import dataclasses

from node.config import build_config
from node.generation.rollouts import Group
from node.models.loading import encode_prompt
from node.peer import Peer
from node.tasks import get_task


def test_received_groups_are_kept_only_where_our_greedy_answer_fails():
    peer = Peer(build_config({"model": {"name": "digit-add"}, "task": {"name": "digits"},
                              "loss": {"variant": "outcome"}, "generation": {"max_new_tokens": 48}}))
    try:
        task = get_task("digits")
        items = [task.item("train", i) for i in range(6)]
        prompts = [encode_prompt(peer.loaded.tokenizer, item) for item in items]
        greedy, _ = peer.backend.generate(prompts, 1, seed=0, greedy=True)
        said = [peer.loaded.tokenizer.decode(out[0].token_ids, skip_special_tokens=True) for out in greedy]
        # the same prompts twice: once with the answer our greedy completion gives (we "succeed"), once with an
        # answer no completion gives (we fail); whatever these weights compute, only the second kind is kept
        ours = [dataclasses.replace(item, answer=text.rsplit(";", 1)[-1].strip()) for item, text in
                zip(items, said, strict=True) if ";" in text]
        wrong = [dataclasses.replace(item, answer="-1") for item in items]
        groups = [Group(item, encode_prompt(peer.loaded.tokenizer, item), [], own=False) for item in ours + wrong]
        kept = peer.failed_here(groups, seed=1)
        assert ours and [g.item for g in kept] == wrong
    finally:
        peer.close()
