"""TensorBoard logging (`--tensorboard DIR`): each step's figures as scalars, for people who live there.

The figures are the metrics file's (node/metrics.py StepResult), named by what they are: `reward`, `accuracy/
train_greedy` (held-out pass@1, at the steps that evaluated), `swarm/...`, `sagc/...`, `loss/...`. The writer is
torch's (torch.utils.tensorboard), which needs the `tensorboard` package: `pip install 'swarm-node[tensorboard]'`.
"""
from __future__ import annotations

from node.errors import ConfigError
from node.metrics import StepResult


def scalars(r: StepResult) -> dict[str, float]:
    """The scalars of one step: tag -> value (evaluations only at the steps that ran one)."""
    s, g, loss = r.swarm, r.group, r.loss
    out = {
        "reward": r.reward, "seconds/step": r.step_seconds, "seconds/generate": r.gen_seconds,
        "seconds/learn": r.learn_seconds, "tokens": float(r.tokens),
        "sagc/group_size": float(r.group_size), "sagc/lambda": g.lam, "sagc/straggler_rate": g.straggler_rate,
        "loss/grad_norm": loss.grad_norm, "loss/mean_weight": loss.mean_weight,
        "loss/filtered_fraction": loss.filtered_frac,
        "swarm/peers": float(s.peers), "swarm/groups_sent": float(s.published),
        "swarm/groups_received": float(s.groups_received), "swarm/groups_used": float(s.groups_used),
        "swarm/rejected": float(sum(s.rejected.values())), "swarm/given": float(s.credited),
    }
    out.update(accuracy_scalars(r.eval))
    return out


def accuracy_scalars(scores: dict[str, float]) -> dict[str, float]:
    """Held-out pass@1 as tags: "train/greedy" -> "accuracy/train_greedy"."""
    return {"accuracy/" + key.replace("/", "_"): value for key, value in scores.items()}


class TensorBoardLogger:
    def __init__(self, folder: str):
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            raise ConfigError("--tensorboard needs the tensorboard package: pip install tensorboard") from None
        self.writer = SummaryWriter(log_dir=folder)

    def log(self, r: StepResult) -> None:
        """Step r.step's figures at x = steps done (r.step + 1); the evaluation before training at x = r.step."""
        for tag, value in accuracy_scalars(r.eval_before).items():
            self.writer.add_scalar(tag, value, r.step)
        for tag, value in scalars(r).items():
            self.writer.add_scalar(tag, value, r.step + 1)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()
