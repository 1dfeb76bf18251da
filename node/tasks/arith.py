"""The project's own procedural arithmetic family: our CPU stand-in for GSM8K -> MATH-500.

The train split holds sums and differences of operands 0-19 (in distribution for the zoo's models); the
test split holds operands 20-99 (out of distribution: longer numbers than any model saw in pre-training).
Variants restrict the operator, which is how the zoo builds peers of different expertise.
"""
from __future__ import annotations

import random
import re

from .base import Item, TaskRef, item_seed

_OPS = {"arith": "+-", "arith-add": "+", "arith-sub": "-"}
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
