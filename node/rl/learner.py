"""The learner: recomputes the current policy's log-probs and takes clipped policy-gradient steps (full model or
LoRA) with the weights and advantages its transfer policy plans (node/rl/transfer: the learner never asks which).

Memory: a batch (own and received groups) is cut into micro-batches of at most `train.micro_batch_tokens`
padded tokens (0, the default: as many as keep a pass within a quarter of the device's memory, from the model's
vocabulary and layer sizes); their gradients accumulate into one update, so the learner's peak memory follows the
budget, not what arrived (a batch within it stays one pass). Several updates per batch (`train.mini_batches`):
the batch's rows are dealt into that many parts, one optimiser update each; the weights, the filter and the
guard's bounds are decided once, from log-probs before the first update (node/rl/transfer/plan.py: plan_loss),
and the PPO ratio R = pi_theta / pi_theta_old, 1 at the first update, is what the clip (eps_low, eps_high)
bounds at the later ones. One update in one piece (the default for small batches) is a single forward pass.
"""
from __future__ import annotations

import contextlib
import os
import statistics

import torch

from node.config import LossConfig, TrainConfig, TrustConfig
from node.generation.rollouts import Group, Received, length_pieces
from node.metrics import LossMetrics

from .alignment import HeadGradients, anchor_gradient, forward_with_head_input
from .batching import (
    LEARNER_MEMORY_SHARE,
    Batch,
    automatic_token_budget,
    build_batch,
    micro_batches,
    mini_batches,
    senders_of,
    take_rows,
)
from .loss import aggregate, surrogate
from .transfer.base import TransferPolicy
from .transfer.guard import SenderJudge
from .transfer.plan import LossPlan, plan_loss


def device_memory(device: torch.device) -> int:
    """Bytes of memory on the learner's device: the GPU's own, else the machine's physical memory."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def token_budget(model, configured: int) -> int:
    """train.micro_batch_tokens, or (0) the automatic budget for this model on its device."""
    if configured:
        return configured
    config = model.config.get_text_config()
    ffn = getattr(config, "intermediate_size", None) or 4 * config.hidden_size  # (GPT-2's configs name none)
    return automatic_token_budget(model.get_output_embeddings().weight.shape[0], config.num_hidden_layers,
                                  config.hidden_size, ffn, int(LEARNER_MEMORY_SHARE * device_memory(model.device)))


def sequence_logprobs(model, batch: Batch, temperature: float, heads: HeadGradients | None = None) -> torch.Tensor:
    """[N, T] log pi_theta of each completion token, from the logits one position earlier.

    Logits are divided by the sampling temperature so that on-policy data has w = 1 (the behaviour
    distribution is the tempered one). heads: collects each party's head gradient in the backward pass
    (node/rl/alignment.py), from the head's input captured in this forward pass."""
    # [N, L', V], [N, L', d] and [N, T]: the position (in the logits kept) that predicts each token
    logits, hidden, before = forward_with_head_input(model, batch, capture=heads is not None)
    picked = logits.gather(1, before[..., None].expand(-1, -1, logits.shape[-1]))  # [N, T, V]
    if heads is not None and hidden is not None:
        h = hidden.gather(1, before[..., None].expand(-1, -1, hidden.shape[-1]))
        own = torch.where(batch.own, heads.own, -1)  # received rows without a sender belong to no party
        heads.watch(picked, h, torch.where(batch.sender >= 0, batch.sender, own))
    logp = torch.log_softmax(picked.float() / temperature, dim=-1)
    tokens = batch.input_ids.gather(1, batch.positions)  # [N, T]
    return logp.gather(2, tokens[..., None]).squeeze(-1)


def objective(plan: LossPlan, logp: torch.Tensor, logp_old: torch.Tensor, cfg: LossConfig) -> torch.Tensor:
    """The loss of a whole batch in one piece under its plan (the negative of the objective); sets the plan's
    loss and clip_frac metrics."""
    per_token, clipped = surrogate(logp, logp_old, plan.weight, plan.advantages, plan.mask, cfg)
    loss = -aggregate(per_token, plan.mask, cfg, *plan.normaliser())
    plan.metrics.loss = loss.item()
    plan.metrics.clip_frac = float(clipped.sum() / plan.mask.sum().clamp(min=1))
    return loss


class Learner:
    def __init__(self, model, pad_id: int, train: TrainConfig, loss: LossConfig, policy: TransferPolicy,
                 temperature: float, lr: float, trust: TrustConfig | None = None):
        """policy: what a group teaches (node/rl/transfer); lr: the resolved learning rate (a peer resolves
        train.lr / train.lora_lr: Peer.learning_rate); trust: the guard's bounds (None: the defaults)."""
        self.model = model
        self.pad_id = pad_id
        self.loss_cfg, self.policy, self.trust = loss, policy, trust or TrustConfig()
        self.temperature = temperature
        self.max_grad_norm = train.max_grad_norm
        self.budget, self.updates = token_budget(model, train.micro_batch_tokens), train.mini_batches
        self.length_pieces = train.length_pieces
        self.autocast = train.autocast
        if train.gradient_checkpointing:  # recompute activations in backward: less memory, ~30% more time
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self.params, lr=lr, weight_decay=train.weight_decay)

    def _autocast(self):
        if self.autocast == "bf16":
            return torch.autocast(device_type=self.model.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def step(self, own: list[Group], received: list[Received] = (), judge: SenderJudge | None = None,
             anchors: list[Group] | None = None) -> LossMetrics:
        """Optimiser update(s) on own and received groups; returns the loss metrics. judge: the sender ledger,
        told each received sender's evidence when the plan is made (its verdict drops a distrusted sender's rows
        this step) and, with the harm detector on, each sender's alignment with our own groups after the update;
        anchors: our own right completions (as groups), the harm detector's reference when our own rows carry no
        advantage (node/rl/alignment.py)."""
        received = list(received)
        self.policy.begin_step(own, received)
        eps_std = self.loss_cfg.eps_std
        batch = build_batch(own, received, self.pad_id, lambda rewards, r: self.policy.advantages(rewards, r, eps_std),
                            drop_flat=self.loss_cfg.aggregation == "dapo")
        if batch is None:
            return LossMetrics(skipped=True)
        batch = batch.to(self.model.device)
        senders = senders_of(received)
        watching = judge is not None and bool(senders) and judge.watches_alignment
        heads = HeadGradients(len(senders)) if watching else None
        reference, anchor_rows = None, 0
        if heads is not None and anchors and not bool((batch.advantages[batch.own] != 0).any()):
            reference, anchor_rows = self._anchor_reference(anchors)
        widths = batch.attention.sum(dim=1).tolist()
        updates, pieces = mini_batches(len(widths), self.updates), micro_batches(widths, self.budget)
        self.model.train()
        try:
            if len(updates) == 1 and len(pieces) == 1:
                metrics = self._whole(batch, senders, judge, heads)
            else:
                metrics = self._in_pieces(batch, senders, judge, widths, pieces, updates, heads)
        finally:
            self.model.eval()
        metrics.anchors = anchor_rows
        if heads is not None:
            judge.judge_alignment(dict(zip(senders, heads.cosines(reference).tolist(), strict=True)))
        return metrics

    def _plan(self, batch: Batch, logp_ref: torch.Tensor, senders: list[bytes],
              judge: SenderJudge | None) -> LossPlan:
        return plan_loss(batch, logp_ref, self.policy, self.trust, judge, senders, self.loss_cfg.max_log_ratio)

    def _anchor_reference(self, anchors: list[Group]) -> tuple[torch.Tensor | None, int]:
        """The anchors' negative log-likelihood head gradient at the weights before this step (one forward
        pass, in micro-batches of the step's budget), and how many anchor completions it comes from."""
        batch = build_batch(anchors, [], self.pad_id, lambda rewards, _: [0.0] * len(rewards), drop_flat=False)
        if batch is None:
            return None, 0
        batch = batch.to(self.model.device)
        total = None
        self.model.eval()
        for piece in micro_batches(batch.attention.sum(dim=1).tolist(), self.budget):
            with self._autocast():
                g = anchor_gradient(self.model, take_rows(batch, torch.tensor(piece, device=batch.mask.device)),
                                    self.temperature)
            if g is not None:
                total = g if total is None else total + g
        return total, 0 if total is None else int(batch.mask.any(dim=1).sum())

    def _whole(self, batch: Batch, senders: list[bytes], judge: SenderJudge | None,
               heads: HeadGradients | None) -> LossMetrics:
        """One update in one backward pass (its forward pass in pieces of similar length: less padding)."""
        with self._autocast():
            logp = self._pieced_logprobs(batch, heads)
        plan = self._plan(batch, logp, senders, judge)
        loss = objective(plan, logp, logp.detach(), self.loss_cfg)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        plan.metrics.grad_norm = float(torch.nn.utils.clip_grad_norm_(self.params, self.max_grad_norm))
        self.optimizer.step()
        return plan.metrics

    def _pieced_logprobs(self, batch: Batch, heads: HeadGradients | None) -> torch.Tensor:
        """[N, T] log pi_theta of the whole batch in one autograd graph, over length pieces: the same values as
        one pass, fewer padded tokens."""
        pieces = length_pieces(batch.attention.sum(dim=1).tolist(), self.length_pieces)
        if len(pieces) == 1:
            return sequence_logprobs(self.model, batch, self.temperature, heads)
        return self._logprobs_over(batch, pieces, heads)

    def _logprobs_over(self, batch: Batch, pieces: list[list[int]],
                       heads: HeadGradients | None = None) -> torch.Tensor:
        """[N, T] log-probs of the batch computed piece by piece (each padded only to its own longest row) and put
        back in row order."""
        width, device = batch.mask.shape[1], batch.mask.device
        parts, order = [], []
        for piece in pieces:
            with self._autocast():
                part = sequence_logprobs(self.model, take_rows(batch, torch.tensor(piece, device=device)),
                                         self.temperature, heads)
            parts.append(torch.nn.functional.pad(part, (0, width - part.shape[1])))
            order += piece
        inverse = torch.empty(len(order), dtype=torch.long, device=device)
        inverse[torch.tensor(order, device=device)] = torch.arange(len(order), device=device)
        return torch.cat(parts)[inverse]

    @torch.no_grad()
    def _logprobs_before(self, batch: Batch, pieces: list[list[int]]) -> torch.Tensor:
        """[N, T] log-probs of the whole batch before any update, micro-batch by micro-batch."""
        return self._logprobs_over(batch, pieces)

    def _in_pieces(self, batch: Batch, senders: list[bytes], judge: SenderJudge | None, widths: list[int],
                   pieces: list[list[int]], updates: list[list[int]], heads: HeadGradients | None) -> LossMetrics:
        cfg = self.loss_cfg
        logp_old = self._logprobs_before(batch, pieces)
        plan = self._plan(batch, logp_old, senders, judge)
        losses, norms, clipped, counted = [], [], 0, 0
        for update in updates:
            rows = torch.tensor(update, device=batch.mask.device)
            n_tokens = int(plan.mask[rows].sum())
            n_rows, n_norm = plan.normaliser(rows)  # (grpo divides by rows, dapo by tokens; loss.foreign_rows)
            if n_tokens == 0:
                continue
            self.optimizer.zero_grad(set_to_none=True)
            total = 0.0
            for piece in micro_batches([widths[i] for i in update], self.budget):
                idx = rows[piece]
                part = take_rows(batch, idx)
                t = part.mask.shape[1]
                with self._autocast():
                    logp = sequence_logprobs(self.model, part, self.temperature, heads)
                per_token, was_clipped = surrogate(logp, logp_old[idx, :t], plan.weight[idx, :t],
                                                   plan.advantages[idx], plan.mask[idx, :t], cfg)
                loss = -aggregate(per_token, plan.mask[idx, :t], cfg, n_rows, n_norm)
                loss.backward()  # gradients accumulate over the update's micro-batches
                total += loss.item()
                clipped += int(was_clipped.sum())
            counted += n_tokens
            norms.append(float(torch.nn.utils.clip_grad_norm_(self.params, self.max_grad_norm)))
            self.optimizer.step()
            losses.append(total)
        metrics = plan.metrics
        metrics.skipped = not losses
        metrics.loss = statistics.fmean(losses) if losses else 0.0
        metrics.grad_norm = statistics.fmean(norms) if norms else 0.0
        metrics.clip_frac = clipped / max(counted, 1)
        return metrics
