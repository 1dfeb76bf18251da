"""One built received group through every transfer policy: what each does to it, as a table (docs/ALGORITHMS.md;
`python -m node.rl.transfer.example` prints it, tests/rl/transfer/test_example.py asserts it value by value).

The group: a partner's four completions of one prompt, three tokens each, our verifier's rewards 1, 1, 0, 0, on
a task whose verifier checks the work; our own greedy answer to the prompt is wrong (b = 0). Token by token,
log pi_ours - log pi_sender is 0 except on three tokens:
- row 1 (right), its 2nd token: the partner's skill, a token we would write 1/100 as often (w = 0.01);
- row 2 (right), its 1st token: one we find 3x likelier than the partner did (w = 3, above C = 2);
- row 4 (wrong), its 1st token: one we would almost never write (log-ratio -55: D = 55 >= g = 50).
Beside it, our own group of the step: four on-policy completions (w = 1), rewards 1, 0, 0, 0.
"""
from __future__ import annotations

import math

import torch

from node.config import TransferConfig, TrustConfig
from node.generation.rollouts import Completion, Group, Received

from .plan import plan_loss
from .registry import build_policy, registry

GEN = -0.1  # the sender's log-prob of every token
LOG_RATIOS = [[0.0, math.log(0.01), 0.0], [math.log(3.0), 0.0, 0.0], [0.0, 0.0, 0.0], [-55.0, 0.0, 0.0]]
REWARDS = [1.0, 1.0, 0.0, 0.0]
OWN_REWARDS = [1.0, 0.0, 0.0, 0.0]
GREEDY = 0.0  # our greedy answer's reward on the prompt
ROWS = ("right, skill token w = 0.01", "right, a token at w = 3", "wrong", "wrong, D = 55")


def example_groups(greedy: float | None) -> tuple[list[Group], list[Received], torch.Tensor]:
    """Our own group, the received group (with our greedy reward where the policy asks for it) and our log-probs
    of the batch's tokens ([8, 3]: our rows first)."""
    def completions(rewards):
        return [Completion([5, 6, 7], [GEN] * 3, "stop", reward=r) for r in rewards]

    own = Group(None, [1, 2], completions(OWN_REWARDS))
    received = Received(Group(None, [1, 2], completions(REWARDS)), b"partner", work_checked=True, greedy=greedy)
    logp = torch.tensor([[GEN] * 3] * 4 + [[GEN + x for x in row] for row in LOG_RATIOS])
    return [own], [received], logp


def decide(name: str) -> dict:
    """What policy `name` (its defaults) does to the example: {"used", "advantages" [4], "weights" [4][3],
    "own_advantages" [4], "own_weights" [4][3]} (received rows' values only where used)."""
    from node.rl.batching import build_batch, senders_of

    policy = build_policy(TransferConfig(name), checks_work=True)
    own, received, logp = example_groups(GREEDY if policy.asks_greedy else None)
    used = policy.shares and (not policy.asks_greedy or policy.admits(REWARDS, GREEDY))
    received = received if used else []
    policy.begin_step(own, received)
    batch = build_batch(own, received, 0, lambda rewards, r: policy.advantages(rewards, r, 1e-4), drop_flat=False)
    plan = plan_loss(batch, logp[: len(batch.mask)], policy, TrustConfig(), None, senders_of(received), 20.0)
    weights = torch.where(plan.mask, plan.weight, torch.zeros_like(plan.weight))
    return {"used": used, "own_advantages": plan.advantages[:4].tolist(), "own_weights": weights[:4].tolist(),
            "advantages": plan.advantages[4:].tolist(), "weights": weights[4:].tolist()}


ORDER = ("alone", "nois", "tis", "vis", "f-nois", "f-vis", "f-tis", "f-tis-or", "hacpo", "success-gated",
         "verified-imitation")  # the table's order: the paper's ablations, its filter's other reading, the others


def _number(x: float) -> str:
    if x == 0:
        return "0"
    if abs(x) < 1e-3:
        return f"{x:.1e}"
    return f"{x:.4f}".rstrip("0").rstrip(".")


def table() -> str:
    """The markdown table of every policy on the example: a cell per received row, "A; w of its 3 tokens"."""
    lines = ["| policy | used | " + " | ".join(f"row {i + 1}: {what}" for i, what in enumerate(ROWS)) + " |",
             "|---|---|" + "---|" * len(ROWS)]
    names = [n for n in ORDER if n in registry()] + [n for n in registry() if n not in ORDER]
    for name in names:
        out = decide(name)
        if not out["used"]:
            cells = ["not used"] * len(ROWS)
        else:
            cells = [f"A {_number(a)}; w {', '.join(_number(w) for w in ws)}"
                     for a, ws in zip(out["advantages"], out["weights"], strict=True)]
        lines.append(f"| {name} | {'yes' if out['used'] else 'no'} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table())
