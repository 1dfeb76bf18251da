"""The F-TIS loss (ALGORITHMS.md section 1) as a pure function of tensors.

Objective per token (maximised; the returned loss is its negative):

    min(w, C) * min(R * A, clip(R, 1 - eps_low, 1 + eps_high) * A)

w = pi_theta / pi_gen is the importance weight between the learner and the generator of the completion,
treated as a constant (computed from detached log-probs: no gradient flows through it, as in TIS).
R = pi_theta / pi_theta_old is the PPO ratio against the learner's own pre-update policy.
A is the group-relative advantage; the F- variants zero it for completions with A <= 0 and divergence
D = sum_t (log pi_gen - log pi_theta) > g (or the per-token mean, by configuration), which keeps them in the
group statistics but stops their gradient.

The outcome variant (success-gated transfer, as "Mutual RL", arXiv 2605.07244, calls it) is the cheap baseline
that ignores log-probs altogether: a received completion teaches only when it beat its group (A > 0), at weight
1, and only for prompts our own greedy answer gets wrong (the peer gates groups before the loss; peer.py).

Shapes: N completions (rows) x T completion positions; `mask` marks real completion tokens.
Behaviour log-probs that are non-finite or positive are impossible for an honest generator: those tokens are
dropped (masked out and counted) and replaced before any arithmetic so that no NaN reaches the gradient.

Foreign tokenizers (rows marked `sequence`): a completion from a peer with another tokenizer is decoded and
re-tokenized by the receiver, so the sender's per-token log-probs do not line up with our tokens. What does
not depend on tokenization is the log-probability of the whole text: the sender's is the sum of its behaviour
log-probs, ours the sum of log pi_theta over our tokens. Such a row gets one weight, the per-token geometric
mean of the sequence ratio, exp((sum log pi_theta - sum log pi_gen) / n) with n our token count (as GSPO
normalises its sequence ratio), truncated at C like the token weights; its behaviour log-probs arrive spread
evenly over our tokens (`spread_logprob`), so the divergence D (sum, or mean) is the same
tokenization-invariant quantity and the F- filter and the plausibility bounds apply unchanged. With an
identical tokenizer the two weights coincide whenever a row's per-token log-ratios are all equal (on-policy
rows, or a constant offset below log C): tests/rl/test_ftis.py checks that case.
One weight per row breaks what makes GRPO's advantages safe: they sum to zero within a group, so whatever all
of a group's completions share (a bare number, then the end token) is pushed neither up nor down. A sender's
wrong completions are ones it found less likely than its right ones, so they carry the larger weights, and
the weighted advantages no longer cancel: the shared text is pushed down. SmolLM2-135M trained on the tiny
peers' groups lost its right greedy answers after one step that way (the end token pushed down: its answers ran
into the length cap). So a foreign group's advantages are re-centred under its weights (`weighted_centering`,
`loss.foreign_centering`): A_i - sum_j w_j A_j / sum_j w_j, whose weighted sum is zero again.

Received positives (`received_floor`, 1 by default, on rows whose verifier checks the work): w is the receiver's
own chance of writing a token relative to the sender's, so on the few tokens that carry a partner's skill (those
we would not write) it is near 0 and the right completion teaches almost nothing (mean 0.009 on the digit
experts' skill tokens, docs/RESULTS.md). A floor f raises the weight of received rows with A > 0 to at least f
(never above C): what a partner got right and we did not is learned like our own right answers, while its wrong
ones keep F-TIS's weight and filter. The verifier scores every received completion itself, so a positive row is
one our own reward calls better than its baseline; where a verifier checks only the answer, text made up before
a right answer would be lifted too, so the floor lifts only rows whose verifier checked their work (`floorable`:
the task's checks_work) and whose per-token mean divergence is at most `received_floor_div`: text we could
nearly have written. Work made up before a right answer (random characters:
7.9-12 nats a token to a digit expert) keeps F-TIS's tiny w; plausible wrong work (another problem's steps:
1.8-6.8) is only partly kept out by the cap, which is why the digits verifier also checks the work (such a row
scores 0 there; docs/SECURITY.md measures both). Within that bound the floor gives a sender no more than
claiming our own log-probs already does (w = 1).

Plausibility (docs/SECURITY.md): a received completion's behaviour log-probs are the sender's claim, and they
set both w and D. For completions y that an honest generator sampled from pi_gen, whatever our model,
E[pi_theta(y) / pi_gen(y)] = sum_y pi_theta(y) <= 1, and the G completions of a group are independent samples,
so by Markov's inequality the group's total log-ratio sum_i sum_t (log pi_theta - log pi_gen) exceeds b with
probability at most exp(-b). A received group above `ratio_bound` (+ `ratio_bound_per_token` per token, for
numerical differences between the two computations) claims its tokens were far less likely to its sampler
than our model finds them: exactly how a sender would pin w at C on text of its choice. Such a group gives
no gradient (its rows are counted as `implausible`). The other side: a received completion whose per-token
mean of log pi_gen - log pi_theta exceeds `div_ceiling` is one our model finds implausibly unlikely (w already
shrinks it; this guards the variants that ignore w). Own completions are never checked.

Senders (`sender`, `prior`): the same inequality, bet on row by row and accumulated per sender across steps
(node/rl/evidence.py), distrusts a sender whose claims keep making our weights larger than sampling would;
its rows give no gradient from the step its evidence reaches `sender_bound` on (counted as `distrusted`).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from node.config import LossConfig
from node.metrics import LossMetrics

from .evidence import row_log_evidence, sender_statistics

_NO_WEIGHT = ("alone", "nois", "f-nois", "outcome")
_UNTRUNCATED = ("vis", "f-vis")


@dataclass
class LossInputs:
    logp: torch.Tensor  # [N, T] learner log-probs of the sampled tokens (carries the gradient)
    logp_old: torch.Tensor  # [N, T] learner log-probs before this update (constant)
    logp_gen: torch.Tensor  # [N, T] generator's behaviour log-probs (from the wire for received groups)
    mask: torch.Tensor  # [N, T] bool, True on completion tokens
    advantages: torch.Tensor  # [N] group-relative advantages
    own: torch.Tensor  # [N] bool, True for completions this peer generated
    group: torch.Tensor | None = None  # [N] long, the row's group (None: each row is a group of its own)
    sequence: torch.Tensor | None = None  # [N] bool, rows re-tokenized from a foreign tokenizer (None: none)
    sender: torch.Tensor | None = None  # [N] long, the row's sender index (-1: own); None: no evidence kept
    prior: torch.Tensor | None = None  # [S] float, each sender's evidence before the step (node/rl/evidence.py)
    floorable: torch.Tensor | None = None  # [N] bool, rows received_floor may lift (scored by a verifier that
    #                                        checks the work: Group.work_checked); None: none


def spread_logprob(total: float, n_tokens: int) -> list[float]:
    """A foreign completion's behaviour log-probability (the sender's sum) spread evenly over our n tokens."""
    return [total / n_tokens] * n_tokens


def weights_from_log_ratio(log_w: torch.Tensor, cfg: LossConfig) -> torch.Tensor:
    """Constant weights of the configured variant from log pi_theta - log pi_gen (clamped before exp): 1,
    untruncated, or truncated at C."""
    if cfg.variant in _NO_WEIGHT:
        return torch.ones_like(log_w)
    w = log_w.clamp(-cfg.max_log_ratio, cfg.max_log_ratio).exp()
    return w if cfg.variant in _UNTRUNCATED else w.clamp(max=cfg.trunc_c)


def importance_weights(logp: torch.Tensor, logp_gen: torch.Tensor, cfg: LossConfig) -> torch.Tensor:
    """[N, T] per-token weights w = pi_theta / pi_gen of the configured variant."""
    return weights_from_log_ratio(logp.detach() - logp_gen, cfg)


def weighted_centering(advantages: torch.Tensor, weight: torch.Tensor, group: torch.Tensor,
                       rows: torch.Tensor) -> torch.Tensor:
    """[N] advantages with those of `rows` re-centred within their group so that their weighted sum is zero:
    A_i - sum_j w_j A_j / sum_j w_j over the group's rows j in `rows` (w: each row's weight, [N]); other rows
    unchanged. GRPO's advantages sum to zero in a group, so what all its completions share (a format, an end
    token) gets no push; once unequal weights multiply them that no longer holds."""
    rows = rows.bool()
    w = torch.where(rows, weight, torch.zeros_like(weight))
    n_groups = int(group.max()) + 1 if len(group) else 0
    total_w = torch.zeros(n_groups, dtype=w.dtype, device=w.device).index_add_(0, group, w)
    total_wa = torch.zeros(n_groups, dtype=w.dtype, device=w.device).index_add_(0, group, w * advantages)
    mean = torch.where(total_w > 0, total_wa / total_w.clamp(min=1e-30), torch.zeros_like(total_w))
    return torch.where(rows, advantages - mean[group], advantages)


def divergence(logp: torch.Tensor, logp_gen: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per completion: sum and per-token mean of (log pi_gen - log pi_theta), an estimate of KL(gen||theta)."""
    per_token = (logp_gen - logp.detach()) * mask
    total = per_token.sum(dim=1)
    return total, total / mask.sum(dim=1).clamp(min=1)


def implausible_rows(d_sum: torch.Tensor, d_mean: torch.Tensor, tokens: torch.Tensor, received: torch.Tensor,
                     group: torch.Tensor | None, cfg: LossConfig) -> torch.Tensor:
    """[N] bool: received rows of groups whose total log-ratio sum(log pi_theta - log pi_gen) is above
    ratio_bound + ratio_bound_per_token * tokens, and received rows whose mean divergence is above div_ceiling."""
    group = torch.arange(len(d_sum), device=d_sum.device) if group is None else group
    n_groups = int(group.max()) + 1 if len(group) else 0
    weight = received.to(d_sum.dtype)
    zeros = torch.zeros(n_groups, dtype=d_sum.dtype, device=d_sum.device)
    log_ratio = zeros.index_add(0, group, -d_sum * weight)
    n_tokens = zeros.index_add(0, group, tokens.to(d_sum.dtype) * weight)
    too_likely = (log_ratio > cfg.ratio_bound + cfg.ratio_bound_per_token * n_tokens)[group]
    return received & (too_likely | (d_mean > cfg.div_ceiling))


@dataclass
class LossPlan:
    """What the loss decides once per batch from log-probs taken before the update (all constant): which
    tokens count, their importance weights, and the advantages after the F- filter. Several updates on one
    batch (mini-batches) share it; the PPO ratio is what changes between them."""

    mask: torch.Tensor  # [N, T] bool: tokens in the loss (valid, not implausible; own only for "alone")
    weight: torch.Tensor  # [N, T] w of the variant, truncated (and capped by negative_c for received negatives)
    advantages: torch.Tensor  # [N] advantages, zeroed for filtered rows
    metrics: LossMetrics  # everything but loss, clip_frac and grad_norm
    evidence: torch.Tensor | None = None  # [S] each sender's evidence after this step (None: not kept)
    share: torch.Tensor | None = None  # [N] each row's count in the normaliser (None: 1 each; loss.foreign_rows)

    def normaliser(self, rows: torch.Tensor | None = None) -> tuple[float, float]:
        """(rows, tokens) that `aggregate` divides by for these rows (all rows: None): each row with tokens counts
        as its share (1 unless loss.foreign_rows = weight makes a foreign row count as its weight)."""
        mask = self.mask if rows is None else self.mask[rows]
        counts = mask.sum(dim=1).to(self.weight.dtype)
        if self.share is None:
            return float((counts > 0).sum()), float(counts.sum())
        share = self.share if rows is None else self.share[rows]
        return float((share * (counts > 0)).sum()), float((share * counts).sum())


def distrusted_rows(d_sum: torch.Tensor, tokens: torch.Tensor, received: torch.Tensor, sender: torch.Tensor,
                    prior: torch.Tensor, cfg: LossConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """([N] bool rows of senders whose evidence reaches sender_bound this step, [S] the senders' evidence)."""
    sender = torch.where(received, sender.to(d_sum.device), torch.full_like(sender.to(d_sum.device), -1))
    row_e = row_log_evidence(-d_sum, tokens, cfg.ratio_bound_per_token, cfg.sender_bet)
    evidence = sender_statistics(row_e, sender, prior.to(d_sum.device, d_sum.dtype))
    if not cfg.sender_bound:
        return torch.zeros_like(received), evidence
    over = torch.cat([evidence >= cfg.sender_bound, torch.zeros(1, dtype=torch.bool, device=d_sum.device)])
    return over[sender], evidence  # index -1 reads the appended False


def plan_loss(logp_ref: torch.Tensor, logp_gen: torch.Tensor, mask: torch.Tensor, advantages: torch.Tensor,
              own: torch.Tensor, group: torch.Tensor | None, cfg: LossConfig,
              sequence: torch.Tensor | None = None, sender: torch.Tensor | None = None,
              prior: torch.Tensor | None = None, floorable: torch.Tensor | None = None) -> LossPlan:
    """logp_ref: the learner's log-probs before the update (detached) for w and D; sequence: rows that take
    one sequence-level weight (foreign tokenizers); sender, prior: the rows' senders and their evidence before
    the step (node/rl/evidence.py; None: not kept); floorable: the rows received_floor may lift (None: none)."""
    logp_ref = logp_ref.detach()
    mask = mask.bool()
    valid_gen = torch.isfinite(logp_gen) & (logp_gen <= 0)
    dropped = mask & ~valid_gen
    mask = mask & valid_gen
    if cfg.variant == "alone":
        mask = mask & own.bool()[:, None]
    # replace bad behaviour log-probs before any arithmetic (masked anyway; this keeps NaN out of autograd)
    logp_gen = torch.where(valid_gen, logp_gen, logp_ref)
    maskf = mask.to(logp_ref.dtype)

    d_sum, d_mean = divergence(logp_ref, logp_gen, maskf)
    received = ~own.bool() & mask.any(dim=1)
    group = None if group is None else group.to(d_sum.device)
    implausible = implausible_rows(d_sum, d_mean, maskf.sum(dim=1), received, group, cfg)
    distrusted, evidence = torch.zeros_like(received), None
    if sender is not None and prior is not None:
        distrusted, evidence = distrusted_rows(d_sum, maskf.sum(dim=1), received, sender, prior, cfg)
        implausible = implausible & ~distrusted  # counted once, as distrusted
    foreign = received & (sequence.bool() if sequence is not None else torch.zeros_like(received))
    if cfg.received_weights == "sequence":  # every received row takes one sequence-level weight
        sequence = received if sequence is None else (sequence.bool() | received)
    mask = mask & ~(implausible | distrusted)[:, None]
    maskf = mask.to(logp_ref.dtype)
    w = importance_weights(logp_ref, logp_gen, cfg)
    raw_log_w = logp_ref - logp_gen
    if sequence is not None and bool(sequence.any()):  # one weight per row, from the mean log-ratio (-D mean)
        rows = sequence.bool()[:, None]
        # one weight per row: the geometric mean of the sequence ratio, exp(mean log-ratio) = exp(-D mean)
        w = torch.where(rows, weights_from_log_ratio(-d_mean, cfg)[:, None].expand_as(w), w)
        raw_log_w = torch.where(rows, -d_mean[:, None].expand_as(raw_log_w), raw_log_w)
    if cfg.negative_c and cfg.variant not in _NO_WEIGHT:  # hardening: received negatives weigh at most this
        negative = ((advantages <= 0) & ~own.bool())[:, None]
        w = torch.where(negative, w.clamp(max=cfg.negative_c), w)
    floored = torch.zeros_like(received)
    if cfg.received_floor and floorable is not None and cfg.variant not in _NO_WEIGHT:  # a partner's right text
        # is not muted below this, where our verifier checked its work (node/tasks checks_work), at most C
        floored = (advantages > 0) & received & (d_mean <= cfg.received_floor_div) & floorable.bool()
        w = torch.where(floored[:, None], w.clamp(min=min(cfg.received_floor, cfg.trunc_c)), w)
    d = d_sum if cfg.divergence == "sum" else d_mean
    has_tokens = mask.any(dim=1)
    foreign = foreign & has_tokens  # (a received group is one sender's: all of its rows foreign, or none)
    if cfg.foreign_centering and group is not None and cfg.variant not in _NO_WEIGHT and bool(foreign.any()):
        advantages = weighted_centering(advantages, w[:, 0], group, foreign)
    filtered = torch.zeros_like(has_tokens)
    if cfg.variant.startswith("f-"):
        filtered = (advantages <= 0) & (d > cfg.g) & has_tokens
    elif cfg.variant == "outcome":  # success-gated transfer: of received completions, only the right ones teach
        filtered = (advantages <= 0) & received & has_tokens
    adv = torch.where(filtered, torch.zeros_like(advantages), advantages)

    n_tok = mask.sum().clamp(min=1)
    metrics = LossMetrics(
        sequences=int(has_tokens.sum()),
        tokens=int(mask.sum()),
        dropped_tokens=int(dropped.sum()),
        implausible=int(implausible.sum()),
        distrusted=int(distrusted.sum()),
        filtered=int(filtered.sum()),
        floored=int((floored & mask.any(dim=1)).sum()),
        kept=int((has_tokens & ~filtered).sum()),
        filtered_frac=float(filtered.sum() / has_tokens.sum().clamp(min=1)),
        mean_weight=float((w * maskf).sum() / n_tok),
        truncated_frac=float(((raw_log_w.exp() > cfg.trunc_c) & mask).sum() / n_tok),
        div_sum_mean=float(d_sum[has_tokens].mean()) if has_tokens.any() else 0.0,
        div_sum_max=float(d_sum[has_tokens].max()) if has_tokens.any() else 0.0,
        div_tok_mean=float(d_mean[has_tokens].mean()) if has_tokens.any() else 0.0,
    )
    share = None
    if cfg.foreign_rows == "weight" and bool(foreign.any()):  # a foreign row counts as its weight, at most 1
        share = torch.where(foreign, w[:, 0].clamp(max=1.0), torch.ones_like(w[:, 0]))
    return LossPlan(mask, w, adv, metrics, evidence, share)


def surrogate(logp: torch.Tensor, logp_old: torch.Tensor, weight: torch.Tensor, advantages: torch.Tensor,
              mask: torch.Tensor, cfg: LossConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """[n, T] per-token objective w * min(R A, clip(R) A) (zero off the mask), and [n, T] bool: tokens whose
    ratio R = pi_theta / pi_theta_old was clipped."""
    log_ratio = (logp - logp_old).clamp(-cfg.max_log_ratio, cfg.max_log_ratio)
    ratio = log_ratio.exp()
    clipped = ratio.clamp(1 - cfg.eps_low, 1 + cfg.eps_high)
    adv = advantages[:, None]
    per_token = weight * torch.minimum(ratio * adv, clipped * adv) * mask.to(logp.dtype)
    return per_token, ((ratio - clipped).abs() > 0) & mask


def aggregate(per_token: torch.Tensor, mask: torch.Tensor, cfg: LossConfig, rows: float,
              tokens: float) -> torch.Tensor:
    """The objective of these rows as a share of an update over `rows` completions / `tokens` tokens (so that
    micro-batches of one update add up to it): GRPO, each completion's token mean over rows; DAPO, every
    token the same over tokens."""
    if cfg.aggregation == "grpo":
        counts = mask.sum(dim=1).clamp(min=1).to(per_token.dtype)
        return (per_token.sum(dim=1) / counts).sum() / max(rows, 1)
    return per_token.sum() / max(tokens, 1)


def ftis_loss(inp: LossInputs, cfg: LossConfig) -> tuple[torch.Tensor, LossMetrics]:
    """The whole batch's loss in one piece (w and D from the current log-probs, detached)."""
    loss, plan = ftis_objective(inp, cfg)
    return loss, plan.metrics


def ftis_objective(inp: LossInputs, cfg: LossConfig) -> tuple[torch.Tensor, LossPlan]:
    """ftis_loss with its whole plan (the senders' evidence included)."""
    plan = plan_loss(inp.logp, inp.logp_gen, inp.mask, inp.advantages, inp.own, inp.group, cfg, inp.sequence,
                     inp.sender, inp.prior, inp.floorable)
    per_token, clipped = surrogate(inp.logp, inp.logp_old, plan.weight, plan.advantages, plan.mask, cfg)
    loss = -aggregate(per_token, plan.mask, cfg, *plan.normaliser())
    plan.metrics.loss = loss.item()
    plan.metrics.clip_frac = float(clipped.sum() / plan.mask.sum().clamp(min=1))
    return loss, plan
