"""Evidence against a sender: an e-detector on the log-probs it claims (docs/SECURITY.md, issue 23).

A received completion y comes with its sender's behaviour log-probs, log pi_gen(y). If the sender sampled y
from pi_gen as it claims, then whatever our own model pi_theta is,

    E[r] = E[pi_theta(y) / pi_gen(y)] = sum_y pi_theta(y) <= 1,

so r is an e-value against "this sender is honest", and so is the bet (1 - lambda) + lambda * r for any
lambda in (0, 1), which is never below 1 - lambda (a row we would never write costs the bet little). Given
our model at a step, a sender's completions are independent samples, so the product of the step's bets is an
e-value too. Each sender's statistic is a CUSUM of their logarithms,

    S_t = max(S_{t-1}, 0) + sum over the sender's rows at step t of log((1 - lambda) + lambda * r),

which restarts at 0 whenever the evidence falls below 1, so a long honest past buys a sender nothing. An
honest sender reaches S >= b once in e^b steps on average (the average run length of an e-detector); a sender
that claims lower log-probs than its sampler gives (which is how it would raise its importance weights) grows
S by about log(lambda r) a row and crosses b = 20 with one or two of its completions. The numerical allowance
of the plausibility bounds (`loss.ratio_bound_per_token` a token, for differences between engines) is taken
off each row's log-ratio first.

What this cannot see: claims equal to what our model would say (r = 1, importance weight 1); the honest-sampler
bound in the codec and the per-sender share cap bound those.
"""
from __future__ import annotations

import math

import torch


def row_log_evidence(log_ratio: torch.Tensor, tokens: torch.Tensor, slack: float, bet: float) -> torch.Tensor:
    """[N] log((1 - bet) + bet * r) per row, r = exp(log_ratio - slack * tokens), computed without overflow;
    log_ratio is the row's sum of log pi_theta - log pi_gen over its `tokens` tokens."""
    adjusted = log_ratio - slack * tokens.to(log_ratio.dtype)
    return torch.logaddexp(torch.full_like(adjusted, math.log1p(-bet)), adjusted + math.log(bet))


def sender_statistics(row_log_e: torch.Tensor, sender: torch.Tensor, prior: torch.Tensor) -> torch.Tensor:
    """[S] each sender's CUSUM after this step: max(prior, 0) + the sum of its rows' log-evidence. sender: [N]
    the row's sender index (-1: none, e.g. our own rows, which are not counted); prior: [S] before the step."""
    counted = sender >= 0
    step = torch.zeros_like(prior).index_add(0, sender[counted], row_log_e[counted].to(prior.dtype))
    return prior.clamp(min=0) + step
