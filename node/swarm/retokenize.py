"""Other peers' tokenizers: which ones this peer can use, and a foreign completion in our tokens.

A sender's card names where its tokenizer comes from (a zoo kind, or a hub tokenizer this machine has cached:
never a download on a peer's word); the receiver builds it, checks its size against the card and keeps it in a
small bounded cache. A foreign completion is decoded to text with the sender's tokenizer and re-tokenized with
ours; it carries the sender's total behaviour log-probability spread over our tokens and trains with one
sequence-level weight (node/rl/transfer).
"""
from __future__ import annotations

import collections
from dataclasses import dataclass

from protocol.codec import Limits, WireCard

FOREIGN_TOKEN_FACTOR = 8  # a foreign completion may have at most our token limit in its sender's tokens (what we
#                           would generate, counted in its generator's), and this many times it in ours (work)
FOREIGN_MEMORY = 16  # other tokenizers remembered (resolved or not)


@dataclass(frozen=True)
class Foreign:
    """Another peer's tokenizer, resolved: what its groups are decoded and checked with."""

    tokenizer: object
    stop_ids: frozenset  # a "stop" completion ends in one: its special tokens (and line ends: sender_stop_ids)
    limits: Limits


class ForeignTokenizers:
    """The tokenizers of other peers that this one may use (swarm.foreign_tokenizers), resolved once each."""

    def __init__(self, fingerprint: str, max_tokens: int, allowed: bool):
        """fingerprint: our own tokenizer's; max_tokens: our generation limit."""
        self.fingerprint, self.max_tokens, self.allowed = fingerprint, max_tokens, allowed
        self.cache: collections.OrderedDict[tuple[str, str], Foreign | None] = collections.OrderedDict()

    def resolve(self, card: WireCard) -> Foreign | None:
        """The sender's tokenizer when it is not ours and we can and may use it (cached, bounded), else None."""
        if not self.allowed:
            return None
        key = (card.tokenizer_source, card.tokenizer)
        if key not in self.cache:
            from node.models.loading import resolve_source

            tok = resolve_source(*key)
            self.cache[key] = None if tok is None or len(tok) != card.vocab_size else Foreign(
                tok, sender_stop_ids(tok), Limits(max_tokens=self.max_tokens))
            while len(self.cache) > FOREIGN_MEMORY:
                self.cache.popitem(last=False)
        self.cache.move_to_end(key)
        return self.cache[key]

    def unusable(self, card: WireCard) -> str:
        """Why a card's tokenizer cannot be used here ("" when it is ours, or foreign and usable)."""
        if card.tokenizer == self.fingerprint or self.resolve(card) is not None:
            return ""
        where = f"tokenizer {card.tokenizer[:16]!r} from {card.tokenizer_source[:40]!r}"
        if not self.allowed:
            return f"{where} is not ours (swarm.foreign_tokenizers is off)"
        return f"{where} is not ours and cannot be built here"


def sender_stop_ids(tokenizer) -> frozenset:
    """The tokens another peer's completions may stop at: its special tokens, and for a base model prompted in
    plain text (node/models/packaged.py) the line ends its answers stop at."""
    from node.models.packaged import answers_in_lines, line_end_ids

    ids = set(tokenizer.all_special_ids)
    return frozenset(ids | line_end_ids(tokenizer) if answers_in_lines(tokenizer) else ids)


def spread_logprob(total: float, n_tokens: int) -> list[float]:
    """A foreign completion's behaviour log-probability (the sender's sum) spread evenly over our n tokens: the
    per-token split means nothing across tokenizers, the total does (node/rl/transfer weighs such a row once)."""
    return [total / n_tokens] * n_tokens


def retokenize(tokenizer, text: str, stopped: bool, total_logprob: float, max_tokens: int
               ) -> tuple[list[int], list[float]] | None:
    """A foreign completion's text in our tokens (then our EOS if it stopped) and the sender's total behaviour
    log-probability spread over them; None when that is empty or longer than we would generate."""
    ids = tokenizer(text, add_special_tokens=False).input_ids
    if stopped:
        ids = ids + [tokenizer.eos_token_id]
    if not ids or len(ids) > max_tokens:
        return None
    return ids, spread_logprob(total_logprob, len(ids))
