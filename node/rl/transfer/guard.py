"""The guard in front of every transfer policy: what received rows may reach the loss at all (docs/SECURITY.md).

A received completion's behaviour log-probs are its sender's claim, and they set both the importance weight
w = pi_theta / pi_gen and the divergence D. Three checks, whatever the policy:

- Invalid claims: a log-prob that is not finite or is positive is impossible for an honest generator; such tokens
  are dropped (counted) and replaced before any arithmetic, so no NaN reaches the gradient.
- Plausibility: for completions y that an honest generator sampled from pi_gen, whatever our model,
  E[pi_theta(y) / pi_gen(y)] = sum_y pi_theta(y) <= 1, and a group's G completions are independent samples, so
  by Markov's inequality the group's total log-ratio sum_i sum_t (log pi_theta - log pi_gen) exceeds b with
  probability at most exp(-b). A received group above trust.ratio_bound (+ ratio_bound_per_token a token, for
  numerical differences between engines) claims its tokens were far less likely to its sampler than our model
  finds them: exactly how a sender would pin w at its cap on text of its choice. Its rows give no gradient
  (`implausible`). The other side: a received row whose per-token mean of log pi_gen - log pi_theta is above
  trust.div_ceiling is one our model finds implausibly unlikely (it guards the policies that ignore w).
- Evidence against a sender (an e-detector): r = pi_theta(y) / pi_gen(y) is an e-value against "this sender
  sampled y as it claims", and so is the bet (1 - lambda) + lambda * r for lambda in (0, 1) (never below
  1 - lambda: a row we would never write costs the bet little). The log of each received row's bet, summed per
  sender, is reported to the sender ledger (`SenderJudge`, node/swarm/senders.py), which keeps each sender's CUSUM
  of them across steps and names the senders whose statistic reached trust.sender_bound: their rows give no
  gradient from that step on (`distrusted`). A sender that claims lower log-probs than its sampler gives (how it
  would raise its weights) grows the statistic by about log(lambda r) a row; claims equal to our model's own
  (r = 1) it cannot see: the per-sender share cap bounds those.
  One bet on whole rows is not enough: rows our model finds unlikely but which the sender claims near-certain
  (r near 0) each cost a bet of lambda = 0.5 log 2, so a sender padding its step with them offset its rows
  pinned at the weight cap (issue 54, 3: 0 of 8 stealth identities distrusted in 51 steps). So a sender's
  rows are bet on in two families, each at SENDER_BETS sizes (trust.sender_bet halved each time), each with a
  CUSUM of its own: whole rows (r of the row), and tokens (each token's r_t = pi_theta(t) / pi_gen(t) given
  its prefix is an e-value too, since E[r_t | prefix] = sum of pi_theta over what pi_gen can sample <= 1, so
  the product of a row's (1 - lambda) + lambda r_t is one). A row near r = 0 costs a small bet only about
  lambda; a sender whose tokens average r_t > 1 (what raises its weight mass above an honest sampler's)
  gains about lambda (mean r_t - 1) a token. A foreign row's per-token split means nothing (its total is
  spread evenly), so it bets as one token: its row. The ledger distrusts at the largest of the 2 x
  SENDER_BETS statistics less log(2 x SENDER_BETS) (a union bound: the rate of false alarms of one bet).
Own rows are never checked.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import torch

from node.config import TrustConfig


class SenderJudge(Protocol):
    """What the learner reports to the sender ledger (node/swarm/senders.py implements it)."""

    @property
    def watches_alignment(self) -> bool:
        """Whether the harm detector is on (the learner then measures each sender's head-gradient cosine)."""
        ...

    def judge_evidence(self, evidence: dict[bytes, tuple[float, ...]]) -> set[bytes]:
        """Takes this step's log-evidence of each sender's rows at each bet size (sender_bets); returns the
        senders whose rows give no gradient (distrusted now or before)."""
        ...

    def judge_alignment(self, cosines: dict[bytes, float]) -> None:
        """Takes this step's cosine between each sender's head gradient and our own (node/rl/alignment.py)."""
        ...

    def judge_weights(self, weights: dict[bytes, tuple[int, int, float]]) -> None:
        """Takes this step's count of each sender's tokens in the loss: (tokens, tokens whose weight the policy's
        cap cut, their summed weight) (plan.py: sender_weights)."""
        ...


def divergence(logp: torch.Tensor, logp_gen: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per completion: sum and per-token mean of (log pi_gen - log pi_theta), an estimate of KL(gen || theta)."""
    per_token = (logp_gen - logp.detach()) * mask
    total = per_token.sum(dim=1)
    return total, total / mask.sum(dim=1).clamp(min=1)


def implausible_rows(d_sum: torch.Tensor, d_mean: torch.Tensor, tokens: torch.Tensor, received: torch.Tensor,
                     group: torch.Tensor | None, trust: TrustConfig) -> torch.Tensor:
    """[N] bool: received rows of groups whose total log-ratio sum(log pi_theta - log pi_gen) is above
    ratio_bound + ratio_bound_per_token * tokens, and received rows whose mean divergence is above div_ceiling."""
    group = torch.arange(len(d_sum), device=d_sum.device) if group is None else group
    n_groups = int(group.max()) + 1 if len(group) else 0
    weight = received.to(d_sum.dtype)
    zeros = torch.zeros(n_groups, dtype=d_sum.dtype, device=d_sum.device)
    log_ratio = zeros.index_add(0, group, -d_sum * weight)
    n_tokens = zeros.index_add(0, group, tokens.to(d_sum.dtype) * weight)
    too_likely = (log_ratio > trust.ratio_bound + trust.ratio_bound_per_token * n_tokens)[group]
    return received & (too_likely | (d_mean > trust.div_ceiling))


def row_log_evidence(log_ratio: torch.Tensor, tokens: torch.Tensor, slack: float, bet: float) -> torch.Tensor:
    """[N] log((1 - bet) + bet * r) per row, r = exp(log_ratio - slack * tokens), computed without overflow;
    log_ratio is the row's sum of log pi_theta - log pi_gen over its `tokens` tokens."""
    adjusted = log_ratio - slack * tokens.to(log_ratio.dtype)
    return torch.logaddexp(torch.full_like(adjusted, math.log1p(-bet)), adjusted + math.log(bet))


SENDER_BETS = 6  # bet sizes of the e-detector: trust.sender_bet, halved 5 times (0.5 down to 1/64 by default)


def sender_bets(trust: TrustConfig) -> tuple[float, ...]:
    return tuple(trust.sender_bet / 2**k for k in range(SENDER_BETS))


def token_log_evidence(token_log_ratio: torch.Tensor, mask: torch.Tensor, slack: float, bet: float) -> torch.Tensor:
    """[N] sum over each row's tokens of log((1 - bet) + bet * r_t), r_t = exp(token_log_ratio - slack)."""
    per_token = row_log_evidence(token_log_ratio, torch.ones_like(token_log_ratio), slack, bet)
    return (per_token * mask.to(per_token.dtype)).sum(dim=1)


def evidence_by_sender(d_sum: torch.Tensor, tokens: torch.Tensor, received: torch.Tensor, sender: torch.Tensor,
                       n_senders: int, trust: TrustConfig, token_log_ratio: torch.Tensor | None = None,
                       mask: torch.Tensor | None = None, foreign: torch.Tensor | None = None) -> torch.Tensor:
    """[S, 2 x SENDER_BETS] the sum of each sender's log-evidence this step at each bet size (sender_bets): on
    whole rows, then on tokens (token_log_ratio [N, T]: log pi_theta - log pi_gen, over `mask`; a foreign row,
    or every row when no tokens are given, bets as one token: its row). sender: [N] index, -1 for our rows."""
    sender = torch.where(received, sender.to(d_sum.device), torch.full_like(sender.to(d_sum.device), -1))
    slack = trust.ratio_bound_per_token
    rows = [row_log_evidence(-d_sum, tokens, slack, bet) for bet in sender_bets(trust)]
    if token_log_ratio is None:
        by_token = rows
    else:
        whole = foreign.bool() if foreign is not None else torch.zeros_like(received)
        by_token = [torch.where(whole, row, token_log_evidence(token_log_ratio, mask, slack, bet))
                    for row, bet in zip(rows, sender_bets(trust), strict=True)]
    row_e = torch.stack(rows + by_token, dim=1)  # [N, 2 x SENDER_BETS]
    counted = sender >= 0
    return torch.zeros(n_senders, row_e.shape[1], dtype=d_sum.dtype, device=d_sum.device).index_add(
        0, sender[counted], row_e[counted])


@dataclass
class Guarded:
    """The batch after the guard: which tokens may reach the loss, and the quantities every policy reads."""

    mask: torch.Tensor  # [N, T] bool: valid tokens of rows neither implausible nor distrusted
    logp_gen: torch.Tensor  # [N, T] behaviour log-probs, invalid ones replaced by ours (masked anyway)
    d_sum: torch.Tensor  # [N]
    d_mean: torch.Tensor  # [N]
    received: torch.Tensor  # [N] bool: received rows with valid tokens (before the cut)
    dropped: torch.Tensor  # [N, T] bool: tokens with invalid behaviour log-probs
    implausible: torch.Tensor  # [N] bool
    distrusted: torch.Tensor  # [N] bool


def guard(logp_ref: torch.Tensor, logp_gen: torch.Tensor, mask: torch.Tensor, own: torch.Tensor,
          group: torch.Tensor, sender: torch.Tensor, senders: list[bytes], trust: TrustConfig,
          judge: SenderJudge | None, foreign: torch.Tensor | None = None) -> Guarded:
    """The three checks on a batch (logp_ref: our log-probs before the update, detached; sender: [N] index into
    `senders`, -1 for our own rows; judge: the sender ledger, None when no evidence is kept; foreign: [N] rows
    re-tokenized from another tokenizer, whose per-token log-probs are a split of their total)."""
    mask = mask.bool()
    valid_gen = torch.isfinite(logp_gen) & (logp_gen <= 0)
    dropped = mask & ~valid_gen
    mask = mask & valid_gen
    logp_gen = torch.where(valid_gen, logp_gen, logp_ref)  # before any arithmetic: keeps NaN out of autograd
    maskf = mask.to(logp_ref.dtype)
    d_sum, d_mean = divergence(logp_ref, logp_gen, maskf)
    received = ~own.bool() & mask.any(dim=1)
    tokens = maskf.sum(dim=1)
    implausible = implausible_rows(d_sum, d_mean, tokens, received, group, trust)
    distrusted = torch.zeros_like(received)
    if judge is not None and senders:
        evidence = evidence_by_sender(d_sum, tokens, received, sender, len(senders), trust,
                                      (logp_ref - logp_gen) * maskf, mask, foreign)
        cut = judge.judge_evidence({s: tuple(e) for s, e in zip(senders, evidence.tolist(), strict=True)})
        if cut:
            cut_index = torch.tensor([s in cut for s in senders] + [False], device=mask.device)
            distrusted = received & cut_index[sender.to(mask.device)]  # index -1 reads the appended False
            implausible = implausible & ~distrusted  # counted once, as distrusted
    mask = mask & ~(implausible | distrusted)[:, None]
    return Guarded(mask, logp_gen, d_sum, d_mean, received, dropped, implausible, distrusted)
