"""The learner: recomputes the current policy's log-probs and takes one F-TIS step (full model or LoRA)."""
from __future__ import annotations

import torch

from node.config import LossConfig, TrainConfig
from node.generation.rollouts import Group
from node.metrics import LossMetrics

from .batching import Batch, build_batch
from .ftis import LossInputs, ftis_loss


def sequence_logprobs(model, batch: Batch, temperature: float) -> torch.Tensor:
    """[N, T] log pi_theta of each completion token, from the logits one position earlier.

    Logits are divided by the sampling temperature so that on-policy data has w = 1 (the behaviour
    distribution is the tempered one)."""
    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention).logits  # [N, L, V]
    before = (batch.positions - 1).clamp(min=0)  # [N, T] position whose logits predict each token
    picked = logits.gather(1, before[..., None].expand(-1, -1, logits.shape[-1]))  # [N, T, V]
    logp = torch.log_softmax(picked.float() / temperature, dim=-1)
    tokens = batch.input_ids.gather(1, batch.positions)  # [N, T]
    return logp.gather(2, tokens[..., None]).squeeze(-1)


class Learner:
    def __init__(self, model, pad_id: int, train: TrainConfig, loss: LossConfig, temperature: float, lr: float):
        """lr: the resolved learning rate (a peer resolves train.lr / train.lora_lr: Peer.learning_rate)."""
        self.model = model
        self.pad_id = pad_id
        self.loss_cfg = loss
        self.temperature = temperature
        self.max_grad_norm = train.max_grad_norm
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self.params, lr=lr, weight_decay=train.weight_decay)

    def step(self, groups: list[Group]) -> LossMetrics:
        """One optimiser step on own and received groups; returns the loss metrics."""
        batch = build_batch(groups, self.pad_id, self.loss_cfg.eps_std,
                            drop_zero_variance=self.loss_cfg.aggregation == "dapo")
        if batch is None:
            return LossMetrics(skipped=True)
        batch = batch.to(self.model.device)
        self.model.train()
        logp = sequence_logprobs(self.model, batch, self.temperature)
        inputs = LossInputs(logp=logp, logp_old=logp.detach(), logp_gen=batch.logp_gen, mask=batch.mask,
                            advantages=batch.advantages, own=batch.own, group=batch.group)
        loss, metrics = ftis_loss(inputs, self.loss_cfg)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        metrics.grad_norm = float(torch.nn.utils.clip_grad_norm_(self.params, self.max_grad_norm))
        self.optimizer.step()
        self.model.eval()
        return metrics
