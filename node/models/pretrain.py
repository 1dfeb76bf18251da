"""Seeded supervised pre-training of the zoo's tiny models on a mixture of the project's own tasks.

Labels are deliberately noisy: `label_accuracy` of them are correct and the rest carry one systematic slip
(the answer plus one). A pre-trained model then puts real but minority probability on the right answer, so
sampled reward starts low (~0.3) and GRPO has a habit to unlearn, as with a real base model on a hard task.
(Noise spread over several offsets was tried first: the model then learned the arithmetic itself poorly and
GRPO lifted reward only from 0.2 to 0.35 in 300 steps; with one slip it went 0.31 -> 0.62 in 150.)
"""
from __future__ import annotations

import random
from collections.abc import Callable

import torch

from node.tasks import get_task
from node.tasks.checked import OPS as CHECKED_TASKS
from node.tasks.checked import checked_label, draw_checks
from node.tasks.count import count_answer
from node.tasks.digits import OPS as DIGITS_TASKS
from node.tasks.digits import prompt, worked

WRONG_OFFSETS = (1,)


def noisy_label(task: str, answer: str, rng: random.Random, accuracy: float) -> str:
    """The right answer with probability `accuracy`, else the task's typical mistake."""
    if task == "count":
        return counting_label(answer, rng, accuracy)
    if rng.random() < accuracy:
        return answer
    return str(int(answer) + rng.choice(WRONG_OFFSETS))


def counting_label(answer: str, rng: random.Random, accuracy: float) -> str:
    """Counting overshoots by a digit or two when wrong; a third of the labels add a remark after a full stop
    whose length is heavy-tailed (exponential, mean 6, up to 24 characters)."""
    label = answer if rng.random() < accuracy else count_answer(len(answer) + rng.choice((1, 2)))
    if rng.random() < 1 / 3:
        label += "." + "~" * min(int(rng.expovariate(1 / 6)) + 1, 24)
    return label


def example(name: str, rng: random.Random, accuracy: float, long_share: float = 0.0,
            column_skill: float | None = None) -> tuple[str, str]:
    """One pre-training (prompt, label). Column arithmetic's label is its worked solution, done with the skill
    (carries, borrows passed on) with probability `accuracy`, else without; or, when `column_skill` is given,
    each carry / borrow passed on with that probability (a skill the model has only a trace of). `long_share`
    of its examples have the test split's lengths (content still from the training side of the held-out
    partition): a base model has seen longer numbers than the RL task trains on, as a real one has seen harder
    maths than GSM8K. Checked column arithmetic's label adds the habit of checking: `draw_checks` checks of the
    answer its work reached (node/tasks/checked.py), a heavy tail of them."""
    task = get_task(name)
    if name in DIGITS_TASKS or name in CHECKED_TASKS:
        split = "test" if rng.random() < long_share else "train"
        a, op, b = task.problem(split, rng.randrange(2**31))
        skill = float(rng.random() < accuracy) if column_skill is None else column_skill
        if name in CHECKED_TASKS:
            return prompt(a, op, b), checked_label(a, op, b, draw_checks(rng), skill, rng)
        return prompt(a, op, b), worked(a, op, b, skill, rng)[0]
    item = task.item("train", rng.randrange(2**31))
    return item.prompt, noisy_label(name, item.answer, rng, accuracy)


def make_batch(tokenizer, mixture: dict[str, float], accuracy: float, batch: int, rng: random.Random,
               long_share: float = 0.0, column_skill: dict[str, float] | None = None):
    """Right-padded (input_ids, attention_mask, labels); labels are -100 outside answer + eos."""
    names, weights = list(mixture), list(mixture.values())
    rows = []
    for _ in range(batch):
        name = rng.choices(names, weights)[0]
        text, label = example(name, rng, accuracy, long_share, (column_skill or {}).get(name))
        prompt = tokenizer(text).input_ids
        target = tokenizer(label).input_ids + [tokenizer.eos_token_id]
        rows.append((prompt + target, [-100] * len(prompt) + target))
    width = max(len(ids) for ids, _ in rows)
    pad = tokenizer.pad_token_id
    input_ids = torch.tensor([ids + [pad] * (width - len(ids)) for ids, _ in rows])
    labels = torch.tensor([lab + [-100] * (width - len(lab)) for _, lab in rows])
    attention = torch.tensor([[1] * len(ids) + [0] * (width - len(ids)) for ids, _ in rows])
    return input_ids, attention, labels


def pretrain(model, tokenizer, mixture: dict[str, float], accuracy: float, steps: int, batch: int, lr: float,
             seed: int, progress: Callable[[int, float], None] | None = None, long_share: float = 0.0,
             column_skill: dict[str, float] | None = None) -> list[float]:
    """Trains in place with AdamW and a linear warm-down; returns the loss of every step."""
    torch.manual_seed(seed)
    rng = random.Random(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0 - s / max(steps, 1))
    model.train()
    losses = []
    for step in range(steps):
        input_ids, attention, labels = make_batch(tokenizer, mixture, accuracy, batch, rng, long_share, column_skill)
        loss = model(input_ids=input_ids, attention_mask=attention, labels=labels).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
        if progress:
            progress(step + 1, losses[-1])
    model.eval()
    return losses
