"""Checked column arithmetic: the digits task's worked sums and differences, each answer followed by a
heavy-tailed number of checks. The project's testbed for long, uneven completions.

"4821+397=" -> "1+7=8,2+9=11,8+3+1=12,4+1=5;5218|5218-397=4821|5218-4821=397": the work and answer of
node/tasks/digits.py, then any number of checks, each "|" and an inverse equation of the answer (a sum's answer
minus one operand gives the other; a difference's answer plus the subtrahend gives the minuend, the minuend minus
the answer the subtrahend), alternating between the two forms.

How many checks a completion makes is the model's habit, learnt in pre-training (node/models/pretrain.py draws
it from `draw_checks`: none half the time, else a discrete Pareto tail up to MAX_CHECKS), so samples of one prompt
differ in length the way a reasoning model's do: most are short, a few re-check again and again. That tail is
what straggler-aware group control (node/sagc) is about; digits' own completions of one prompt differ by at
most a few tokens and never straggle.

The reward is digits' (finished, right answer, this problem's work) and every check true: a check is one of
the answer's two inverse equations, exactly. Checks neither earn nor cost reward when right, so the length of
a right completion is the model's habit, not something RL is paid for. Problems, splits and the held-out
partition are digits' (by content, the same hash), so the two tasks hold out the same problems.
"""
from __future__ import annotations

import dataclasses
import random
import re

from .base import Item
from .digits import DigitsTask, parse_prompt, worked

OPS = {"digits-check": "+-", "digits-check-add": "+", "digits-check-sub": "-"}
MAX_CHECKS = 8  # the most checks pre-training writes (a completion's length: up to ~180 BPE tokens in
#                 distribution, ~210 out of it)
NO_CHECK_SHARE = 0.5  # pre-training: share of labels with no check
CHECK_TAIL = 1.0  # pre-training: P(at least k checks | any) = 1 / k^CHECK_TAIL (a discrete Pareto tail, cut
#                   at MAX_CHECKS)
SEPARATOR = "|"
_CHECKED_FORM = re.compile(r"([0-9+\-=,]*;-?\d+)((?:\|[0-9+\-=]*)*)")


def inverse_checks(a: int, op: str, b: int, result: int) -> tuple[str, str]:
    """The two inverse equations that check `result` as the answer of a (op) b."""
    if op == "+":
        return f"{result}-{b}={a}", f"{result}-{a}={b}"
    return f"{result}+{b}={a}", f"{a}-{result}={b}"


def checks(a: int, op: str, b: int, result: int, count: int) -> str:
    """`count` checks of `result`, alternating between the two inverse equations, each after the separator."""
    forms = inverse_checks(a, op, b, result)
    return "".join(SEPARATOR + forms[j % 2] for j in range(count))


def draw_checks(rng: random.Random, no_check: float = NO_CHECK_SHARE, tail: float = CHECK_TAIL,
                most: int = MAX_CHECKS) -> int:
    """How many checks one pre-training label makes: 0 with probability `no_check`, else k >= 1 from a discrete
    Pareto tail, P(at least k) = k^-tail, cut at `most` (drawn from the cut distribution itself: no pile-up
    at `most`). With the defaults: none 50% of the time, one 28%, two or three 14%, six to eight 3%."""
    if rng.random() < no_check:
        return 0
    least = (most + 1) ** -tail  # u in (least, 1] maps to k = floor(u^(-1/tail)) in [1, most]
    u = least + (1.0 - least) * (1.0 - rng.random())
    return min(int(u ** (-1.0 / tail)), most)


def checked_label(a: int, op: str, b: int, count: int, skill: float = 1.0,
                  rng: random.Random | None = None) -> str:
    """A completion of the checked form: the work done with `skill` (digits' `worked`), then `count` checks of
    the answer that work reached (a slipped answer's checks are false, as a careless checker's are)."""
    text, result = worked(a, op, b, skill, rng)
    return text + checks(a, op, b, result, count)


def checks_hold(a: int, op: str, b: int, tail: str) -> bool:
    """Whether every check of a completion's check part ("|...|...", maybe empty) is one of the right answer's
    inverse equations."""
    right = set(inverse_checks(a, op, b, a + b if op == "+" else a - b))
    return all(check in right for check in tail.split(SEPARATOR)[1:])


class CheckedDigitsTask(DigitsTask):
    version = "1"
    max_new_tokens = 224  # completion cap: MAX_CHECKS checks of a 6-column problem with the zoo's BPE tokenizer
    #                       are ~210 tokens (char tokenizer: ~190); prompt + cap stay within the zoo's 256
    #                       positions

    def __init__(self, name: str = "digits-check"):
        self.name = name
        self.ops = OPS[name]

    def item(self, split: str, index: int) -> Item:
        item = super().item(split, index)
        return dataclasses.replace(item, question=item.question.replace("after a semicolon.",
                                                                        "after a semicolon, then check it."))

    def score(self, item: Item, completion: str, finished: bool) -> float:
        """digits' reward of the work and answer (node/tasks/digits.py), and 0 unless every check holds. A
        completion not in the zoo's form (a chat model's sentence) is scored as digits scores it."""
        compact = re.sub(r"\s+", "", completion)
        form = _CHECKED_FORM.fullmatch(compact)
        if form is None:
            return super().score(item, completion, finished)
        a, op, b = parse_prompt(item.prompt)
        if not checks_hold(a, op, b, form.group(2)):
            return 0.0
        return super().score(item, form.group(1), finished)
