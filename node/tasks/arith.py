"""The project's own procedural arithmetic family: our CPU stand-in for GSM8K -> MATH-500.

`arith`: the train split holds sums and differences of operands 0-19 (in distribution for the zoo's models); the
test split holds operands 20-99 (out of distribution: longer numbers than any model saw in pre-training).
Variants restrict the operator, which is how the zoo builds peers of different expertise. Its held-out prompts
of the train split are drawn from the same 400 problems as training.

`arith-wide`: sums and differences of up to two digits in distribution, three out of it, answered with the
number only, for real models (a 135M-270M model gets some right and has room to learn). Its problems are held out
by content, as `digits`' are: no held-out prompt is ever a training prompt.

`arith-work`: arith-wide's problems with the working asked for ("Work it out step by step"): a chat model's answers
run to a few hundred tokens and differ in length from sample to sample, the long-completion regime of real models
(what straggler-aware group control acts on). Scored on the final answer, as arith-wide is.
"""
from __future__ import annotations

import random
import re

from .base import HELD_OUT_START, Item, TaskRef, item_seed
from .digits import partitioned_problem

_OPS = {"arith": "+-", "arith-add": "+", "arith-sub": "-"}
WIDE_OPS = {"arith-wide": "+-", "arith-wide-add": "+", "arith-wide-sub": "-"}
WORK_OPS = {"arith-work": "+-", "arith-work-add": "+", "arith-work-sub": "-"}
# digits of the longer operand per split, with their weights (the shorter has 1 to as many, uniform)
WIDE_DIGITS = {"train": {1: 1, 2: 2}, "test": {3: 1}}
_RANGES = {"train": (0, 19), "test": (20, 99)}
_BOXED = re.compile(r"\\boxed\{\s*(-?\d+)\s*\}")
_INTEGER = re.compile(r"-?\d+")


class ArithmeticTask:
    version = "1"
    splits = ("train", "test")

    def __init__(self, name: str = "arith"):
        self.name = name
        self.ops = _OPS[name]

    def item(self, split: str, index: int) -> Item:
        lo, hi = _RANGES[split]
        rng = random.Random(item_seed(self.name, self.version, split, index))
        op = rng.choice(self.ops)
        a, b = rng.randint(lo, hi), rng.randint(lo, hi)
        if op == "-" and b > a:
            a, b = b, a  # differences stay non-negative
        answer = a + b if op == "+" else a - b
        return Item(
            ref=TaskRef(self.name, self.version, split, index),
            prompt=f"{a}{op}{b}=",
            question=f"What is {a} {op} {b}? Reply with the number only.",
            answer=str(answer),
        )

    def score(self, item: Item, completion: str, finished: bool) -> float:
        """1.0 when the completion ended by itself (format) and its final answer is right: the last boxed
        integer if any, else the last integer (tiny models write only the number; chat models a sentence)."""
        if not finished:
            return 0.0
        found = _BOXED.findall(completion) or _INTEGER.findall(completion)
        return 1.0 if found and found[-1] == item.answer else 0.0


class WideArithmeticTask(ArithmeticTask):
    """Sums and differences of 1-2 digit operands (train split) and 3-digit ones (test split), the larger operand
    first, held out by content (`digits.held_out`); scored like `arith` (the last boxed or bare integer)."""
    max_new_tokens = 16  # a chat model's short sentence around a number of up to five digits

    instruction = "Reply with the number only."

    def __init__(self, name: str = "arith-wide"):
        self.name = name
        self.ops = WIDE_OPS[name]

    def problem(self, split: str, index: int) -> tuple[int, str, int]:
        """(a, op, b) of an item, drawn from its seed until its content falls on its side of the partition."""
        return partitioned_problem(item_seed(self.name, self.version, split, index), self.ops, WIDE_DIGITS[split],
                                   index >= HELD_OUT_START)

    def item(self, split: str, index: int) -> Item:
        a, op, b = self.problem(split, index)
        return Item(ref=TaskRef(self.name, self.version, split, index), prompt=f"{a}{op}{b}=",
                    question=f"What is {a} {op} {b}? {self.instruction}",
                    answer=str(a + b if op == "+" else a - b))

    @staticmethod
    def kind(item: Item) -> str:
        """"sum" or "difference" (held-out accuracy per operator, as `digits` reports it)."""
        return "difference" if "-" in item.prompt[1:] else "sum"


class WorkedArithmeticTask(WideArithmeticTask):
    """arith-wide's problems (held out by content the same way) with the working asked for: answers of a few
    hundred tokens whose length varies from sample to sample. The cap leaves that tail visible (a 135M chat
    model's working: docs/RESULTS.md, real models); the answer is the last boxed or bare integer, as in arith."""
    max_new_tokens = 384
    instruction = "Work it out step by step, then give the answer."

    def __init__(self, name: str = "arith-work"):
        self.name = name
        self.ops = WORK_OPS[name]
