"""What generation produces: a complete group of G completions of one prompt by one model, and how a
completion is cut, and scored (own and received completions alike: rewards are never trusted)."""
from __future__ import annotations

from dataclasses import dataclass

from node.tasks import Item, Task


def require_cap(max_new_tokens: int) -> int:
    """A backend's completion cap; 0 (generation.max_new_tokens' "the task's cap") must have been resolved by
    then (node/config.py with_completion_cap, as Peer and `swarm eval` do)."""
    if max_new_tokens < 1:
        raise ValueError("generation.max_new_tokens is 0 (the task's cap): resolve it with "
                         "node.config.with_completion_cap before building a generation backend")
    return max_new_tokens


@dataclass
class Completion:
    token_ids: list[int]  # sampled ids, up to and including EOS when finish_reason == "stop"
    logprobs: list[float]  # behaviour log-probs: log of the tempered / nucleus distribution sampled from
    finish_reason: str  # "stop" (EOS sampled) or "length" (max_new_tokens reached)
    text: str = ""  # decoded without special tokens
    reward: float = 0.0  # set by the local verifier


@dataclass
class Group:
    item: Item
    prompt_ids: list[int]
    completions: list[Completion]
    gen_seconds: float = 0.0  # wall time of the generate call that produced this group

    @property
    def lengths(self) -> list[int]:
        return [len(c.token_ids) for c in self.completions]

    @property
    def rewards(self) -> list[float]:
        return [c.reward for c in self.completions]


@dataclass(frozen=True)
class Received:
    """Another peer's group as the trust boundary hands it on (node/swarm/boundary.py): rebuilt and re-scored
    here, with what we know of where it came from. Nothing in it is what we believe of its sender (that is the
    sender ledger's: node/swarm/senders.py)."""

    group: Group
    sender: bytes = b""  # its sender's identity (announcement subkey)
    foreign: bool = False  # re-tokenized from a peer with another tokenizer: each completion's log-probs are the
    #                        sender's total spread evenly over our tokens
    work_checked: bool = False  # scored by a verifier that checks the work, not only the answer (node/tasks)
    greedy: float | None = None  # our own greedy answer's reward on its prompt, where the transfer policy asked
    #                              for it (node/peer.py); None: not measured
    created: float = 0.0  # the second its generator drew it (with its index, which of the generator's groups)


def has_variance(rewards: list[float]) -> bool:
    """Whether a group's rewards differ: a group scoring the same everywhere has zero group-relative advantage,
    no signal, only learner time (DAPO drops such groups; the exchange counts them as uninformative)."""
    return max(rewards) > min(rewards)


def score_completion(task: Task, item: Item, completion: Completion) -> float:
    """The verifiable reward of one completion under this peer's verifier."""
    return task.score(item, completion.text, completion.finish_reason == "stop")


def score_group(task: Task, group: Group) -> None:
    """Sets each completion's reward with the task's verifier."""
    for c in group.completions:
        c.reward = score_completion(task, group.item, c)


def split_completion(ids: list[int], logprobs: list[float], eos_ids: set[int]) -> tuple[list, list, str]:
    """Cuts a generated row at its first EOS (kept); returns ids, log-probs and the finish reason."""
    for t, tok in enumerate(ids):
        if tok in eos_ids:
            return ids[: t + 1], logprobs[: t + 1], "stop"
    return ids, logprobs, "length"


def stop_ids(model, tokenizer) -> tuple[set[int], int]:
    """(EOS ids, pad id) of a model: its generation config's EOS list, else the tokenizer's EOS."""
    eos = model.generation_config.eos_token_id if model.generation_config.eos_token_id is not None \
        else tokenizer.eos_token_id
    eos_ids = set(eos if isinstance(eos, list) else [eos])
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(eos_ids)
    return eos_ids, pad_id


def length_pieces(widths: list[int], count: int, min_saving: float = 0.2) -> list[list[int]]:
    """Row indices of one forward pass cut into at most `count` pieces of similar width (rows sorted by width,
    equal numbers of rows a piece), when that pads at least `min_saving` fewer tokens than one piece does;
    else one piece in row order. Each piece pads only to its own longest row (take_rows)."""
    if not widths:
        return []
    count = max(1, min(count, len(widths)))
    order = sorted(range(len(widths)), key=lambda i: widths[i])
    pieces = [order[k * len(order) // count:(k + 1) * len(order) // count] for k in range(count)]
    pieces = [piece for piece in pieces if piece]
    whole = len(widths) * max(widths)
    padded = sum(len(piece) * widths[piece[-1]] for piece in pieces)
    if len(pieces) == 1 or padded > (1 - min_saving) * whole:
        return [list(range(len(widths)))]
    return pieces
