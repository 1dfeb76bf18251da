"""Whom our own groups disagree with: each sender's pull on the model against our own, and a harm detector.

The e-detector of node/rl/transfer/guard.py catches senders whose claims are false. An honest sender can still hurt
us: its groups are real samples of its model, scored by our verifier, and yet what they teach pulls our
model away from what our own on-policy groups teach (another model family's phrasing re-tokenized into ours,
a skill that interferes with ours). Our own groups are the one source we trust, so they are the reference
(as a server's small clean data set is in FLTrust, Cao et al., NDSS 2021): each step, the gradient that a
sender's rows give is compared with the gradient that our own rows give.

Measured cheaply, at the output head: the loss's gradient with respect to the head's weight is
sum over tokens of h_t (x) dL/dz_t, with h_t the head's input (the last hidden state) and dL/dz_t the gradient
of the loss with respect to the token's logits, both of which the step's one forward and backward pass
compute anyway (a LoRA peer's head is frozen; its head gradient is still the direction the loss pushes the
logits in, seen through the same features). Wide vocabularies are count-sketched to SKETCH columns (a fixed
random bucket and sign per token id: inner products are kept in expectation), so a sender's gradient is a
[hidden x SKETCH] matrix whatever the model.

The decision is a bet on the cosine itself, step by step like the e-detector. With c_t the cosine between a
sender's and our own head gradients at step t, the bet 1 - lambda * clip(k c_t, -1, 1) has expectation at
most 1 whenever the sender's groups do not pull against ours on average (E[clip(k c_t)] >= 0), so its running
product is an e-process against "this sender does not hurt us". Each sender's statistic is a CUSUM of its
logarithms,

    H_t = max(H_{t-1}, 0) + log(1 - lambda * clip(k c_t, -1, 1)),

which forgets a helpful past; a sender whose H reaches `trust.harm_bound` is demoted (not pulled from for
`trust.demote_steps` steps, then tried afresh). Steps where either gradient is zero (all of the sender's rows
refused; no reference, below) bet nothing.

Betting on the size of the cosine, not only its sign, matters: a partner that teaches what our own groups do not
(a skill we lack) gives gradients nearly orthogonal to ours, cosines of a few hundredths of either sign, and
such small bets take thousands of steps to reach b (a sign test would demote it about once in e^b steps); a
sender whose groups pull against ours at c = -0.25 every step (lambda = 0.5, k = 2) reaches b = 5 in 23 steps,
at -0.5 in 13. Any sender that does not pull against us on average reaches b once in e^b steps at the very least
(Ville's inequality).

When our own rows carry no advantage (every own group scored the same: a weak peer that samples no right answer,
as SmolLM2-135M on the arithmetic tasks), there is no own learning signal to compare with, and an honest
partner's groups can still wreck what we know. The reference is then our *anchors*: completions of our own that
our verifier called right (sampled ones, and greedy answers to a small probe of training prompts: node/peer.py),
and the gradient is that of their negative log-likelihood, h (x) (softmax(z / T) - onehot(y)) / T at the head,
from one forward pass without a backward one (`anchor_gradient`). A sender whose rows pull against it teaches
us to forget right answers we give; one that teaches what we lack without disturbing them is near-orthogonal
to it, as above. No anchors (nothing right at all): no reference, no bet.
"""
from __future__ import annotations

import math

import torch

SKETCH = 4096  # head-gradient columns kept for vocabularies wider than this (count sketch)
_SKETCH_SEED = 0x5EED  # the sketch is a fixed function of the vocabulary size (not the run's random state)


def sketch_columns(vocab: int, width: int = SKETCH) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(bucket [V] long, sign [V] float) of the count sketch of a V-wide vocabulary, or None when V <= width
    (kept whole)."""
    if vocab <= width:
        return None
    gen = torch.Generator().manual_seed(_SKETCH_SEED + vocab)
    bucket = torch.randint(0, width, (vocab,), generator=gen)
    sign = torch.randint(0, 2, (vocab,), generator=gen).float() * 2 - 1
    return bucket, sign


def head_gradient(hidden: torch.Tensor, dlogits: torch.Tensor,
                  sketch: tuple[torch.Tensor, torch.Tensor] | None) -> torch.Tensor:
    """[d, k] sum over tokens of hidden_t (x) sketch(dlogits_t). hidden: [n, d], dlogits: [n, V]."""
    dlogits = dlogits.float()
    if sketch is not None:
        bucket, sign = (t.to(dlogits.device) for t in sketch)
        dlogits = torch.zeros(dlogits.shape[0], SKETCH, device=dlogits.device).index_add_(1, bucket, dlogits * sign)
    return hidden.float().T @ dlogits


def cosines(grads: dict[int, torch.Tensor], reference: int, n_senders: int) -> torch.Tensor:
    """[S] cosine between each sender's head gradient and the reference's (ours); 0 where either is missing
    or zero."""
    out = torch.zeros(n_senders)
    ref = grads.get(reference)
    if ref is None or not bool(ref.any()):
        return out
    ref_norm = ref.norm()
    for s in range(n_senders):
        g = grads.get(s)
        if g is not None and bool(g.any()):
            out[s] = float((g * ref).sum() / (g.norm() * ref_norm))
    return out


HARM_SCALE = 2.0  # k: the cosine a full bet is made at is 1 / k (cosines of head gradients are mostly < 0.5)


def harm_log_bet(cos: float, bet: float) -> float:
    """A step's addition to a sender's harm CUSUM (kept by the sender ledger, node/swarm/senders.py):
    log(1 - bet * clip(k cos, -1, 1))."""
    return math.log1p(-bet * min(max(HARM_SCALE * cos, -1.0), 1.0))


def predicting_positions(batch) -> tuple[int, torch.Tensor]:
    """(first, before): the first position whose logits predict a completion token, and [N, T] the position
    predicting each completion token counted from `first` (0 where a row is padded)."""
    before = (batch.positions - 1).clamp(min=0)
    first = int(before[batch.mask].min()) if bool(batch.mask.any()) else 0
    return first, (before - first).clamp(min=0)


def forward_with_head_input(model, batch, capture: bool = True
                            ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """The model's logits [N, L - first, V] from the first position that predicts a completion token on
    (`predicting_positions`; transformers' logits_to_keep: the output head never runs on the prompt before it,
    which is most of a step's head work for a model with a large vocabulary and a long prompt: Gemma 3's 262k
    columns, a chat template's preamble), with `capture` the head's input [N, L - first, d] (the last hidden
    state there, taken by a forward hook on the head), and [N, T] the position in both that predicts each
    completion token."""
    first, before = predicting_positions(batch)
    hidden = []
    hook = (model.get_output_embeddings().register_forward_hook(lambda _m, args, _out: hidden.append(args[0]))
            if capture else None)
    try:
        logits = model(input_ids=batch.input_ids, attention_mask=batch.attention,
                       logits_to_keep=batch.input_ids.shape[1] - first).logits
    finally:
        if hook is not None:
            hook.remove()
    return logits, hidden[0] if hidden else None, before


@torch.no_grad()
def anchor_gradient(model, batch, temperature: float) -> torch.Tensor | None:
    """[d, k] head gradient of the negative log-likelihood of a batch's completions (node/rl/batching.py
    Batch; our anchors), from one forward pass: sum over completion tokens of h_t (x) sketch(softmax(z_t / T) -
    onehot(y_t)) / T. None when the batch has no completion token."""
    logits, hidden, before = forward_with_head_input(model, batch)
    if hidden is None or not bool(batch.mask.any()):
        return None
    before = before[batch.mask]  # [n] flat: the position predicting each token
    rows = torch.arange(batch.mask.shape[0], device=batch.mask.device)[:, None].expand_as(batch.mask)[batch.mask]
    z = logits[rows, before].float()  # [n, V]
    h = hidden[rows, before]  # [n, d]
    tokens = batch.input_ids.gather(1, batch.positions)[batch.mask]  # [n]
    dz = torch.softmax(z / temperature, dim=-1)
    dz[torch.arange(len(tokens), device=dz.device), tokens] -= 1.0
    return head_gradient(h, dz / temperature, sketch_columns(z.shape[-1]))


class HeadGradients:
    """Collects the head gradient of each party of a step (sender indices 0..S-1, our own rows as S) over the
    step's micro-batches: `watch` is called with each micro-batch's logits before its backward pass."""

    def __init__(self, n_senders: int):
        self.own = n_senders
        self.grads: dict[int, torch.Tensor] = {}
        self._sketch: dict[int, tuple[torch.Tensor, torch.Tensor] | None] = {}

    def watch(self, picked: torch.Tensor, hidden: torch.Tensor, party: torch.Tensor) -> None:
        """picked: [n, T, V] logits that the loss reads (requires grad); hidden: [n, T, d] the head's input
        at the same positions; party: [n] each row's party (-1: none). Adds to the parties' gradients in backward."""
        if not picked.requires_grad:
            return
        hidden, party = hidden.detach(), party.to(picked.device)
        vocab = picked.shape[-1]
        if vocab not in self._sketch:
            self._sketch[vocab] = sketch_columns(vocab)
        sketch = self._sketch[vocab]

        def collect(grad: torch.Tensor) -> None:
            for p in party.unique().tolist():
                if p < 0:
                    continue
                rows = party == p
                g = head_gradient(hidden[rows].reshape(-1, hidden.shape[-1]), grad[rows].reshape(-1, vocab), sketch)
                self.grads[p] = g if p not in self.grads else self.grads[p] + g

        picked.register_hook(collect)

    def cosines(self, reference: torch.Tensor | None = None) -> torch.Tensor:
        """[S] each sender's cosine with our own rows' head gradient over the step, or with `reference`
        (the anchors' gradient) when our own rows gave none."""
        own = self.grads.get(self.own)
        if reference is not None and (own is None or not bool(own.any())):
            return cosines({**self.grads, self.own: reference}, self.own, self.own)
        return cosines(self.grads, self.own, self.own)
