"""Helpers the tests share (imported as `tests.fixtures`; pytest fixtures live in the conftest.py files)."""
import zlib

import msgpack
import torch
from transformers.generation.logits_process import TopPLogitsWarper

from node.config import build_config
from node.peer import Peer
from protocol import ANNOUNCE_SHARDS
from protocol.codec import Announcement, BundleRef, WireCard, encode_announcement


def peer(hub, name, model="tiny-add", transfer="auto", **swarm):
    """A zoo peer in the in-memory swarm that reads every announcement shard each step and (unless told)
    trains on every valid group, informative or not, so that these tests count what flows. Its seed comes from
    its name: peers draw prompts of their own, as real peers do (two peers with one seed draw the same task
    items, and where their models sample the same completions, the groups are one group, used once)."""
    cfg = build_config({"model": {"name": model}, "task": {"name": "arith"},
                        "train": {"group_policy": "fixed", "group_size": 4, "prompts_per_step": 4,
                                  "seed": zlib.crc32(name.encode()) % 1000},
                        "swarm": {"gather_deadline": 0.2, "shards_per_step": ANNOUNCE_SHARDS,
                                  "informative_only": False, **swarm},
                        "transfer": {"policy": transfer}})
    return Peer(cfg, transport=hub.transport(name))


def publish_bundles(hub, sender: str, card: WireCard | None = None, **bundles: bytes) -> None:
    """As any peer would, honest or not: serves the given bundles (kind=bytes; the other kind, if never served,
    empty) and announces them with a card of our tokenizer."""
    t = hub.transport(sender)
    for kind in ("groups", "summaries"):
        if kind in bundles or sender not in hub.served or hub.served[sender].latest(kind) is None:
            t.serve(kind, bundles.get(kind, msgpack.packb([])))
    refs = {}
    for kind in ("groups", "summaries"):
        digest, bundle = hub.served[sender].latest(kind)
        refs[kind] = BundleRef(digest, len(bundle), 1)
    t.announce_async(encode_announcement(Announcement(sender, (), 0, hub.clock(), card or zoo_card(), **refs)), 60)


def zoo_card() -> WireCard:
    from node.models.tokenizer import build_tokenizer, tokenizer_fingerprint

    tok = build_tokenizer()
    return WireCard("qwen2", 1, False, tokenizer_fingerprint(tok), len(tok), "transformers", 1.0, 1.0, "test")


def gather(p: Peer, budget: int, sender_cap: int):
    """One gather as a step makes it: announcements read and pulls started first."""
    p.exchange.prefetch()
    return p.exchange.gather(budget=budget, sender_cap=sender_cap)


def counted_reads(p) -> list[int]:
    """The number of shards of each directory read peer p starts from now on."""
    reads = []
    fetch = p.exchange.transport.fetch_shards_async
    p.exchange.transport.fetch_shards_async = lambda shards: (reads.append(len(shards)), fetch(shards))[1]
    return reads


def forward_logprobs(model, prompt, completion, temperature, top_p):
    """Log-probs of `completion` under the tempered, nucleus-filtered next-token distribution."""
    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1: -1] / temperature  # [T, V]
    if top_p < 1.0:
        logits = TopPLogitsWarper(top_p)(None, logits)
    logp = torch.log_softmax(logits.float(), dim=-1)
    return logp.gather(1, torch.tensor(completion)[:, None]).squeeze(1)


# what a hub model's generation_config may carry; none of it is configured here
MODEL_DEFAULTS = {"do_sample": True, "repetition_penalty": 1.3, "no_repeat_ngram_size": 1, "top_k": 2, "min_p": 0.3,
                  "temperature": 0.5, "top_p": 0.5}
