"""Counting: a task whose completion lengths vary, for measuring group-size control on a CPU.

"to 5:" -> "12345". The verifier reads the answer up to the first "." and ignores any remark after it, the
way a math verifier ignores how long the reasoning was; the zoo pre-trains tiny-count with such remarks of
heavy-tailed length, and since reward neither pays for nor punishes them, the length tail survives training:
groups keep straggling, the situation SAGC is made for. (A first version scored the whole completion: the
model then learned to stop within ten steps and stragglers vanished.) Train split: 1-9; test split: 10-15.
"""
from __future__ import annotations

import random

from .base import Item, TaskRef, item_seed

_RANGES = {"train": (1, 9), "test": (10, 15)}


def count_answer(n: int) -> str:
    return "".join(str(i % 10) for i in range(1, n + 1))


class CountTask:
    name = "count"
    version = "1"
    splits = ("train", "test")

    def item(self, split: str, index: int) -> Item:
        lo, hi = _RANGES[split]
        n = random.Random(item_seed(self.name, self.version, split, index)).randint(lo, hi)
        return Item(TaskRef(self.name, self.version, split, index), prompt=f"to {n}:",
                    question=f"Write the digits 1 to {n} in a row (after 9 comes 0), then a full stop.",
                    answer=count_answer(n))

    def score(self, item: Item, completion: str, finished: bool) -> float:
        return 1.0 if finished and completion.split(".")[0].strip() == item.answer else 0.0
