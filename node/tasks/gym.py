"""reasoning-gym tasks, scored by reasoning-gym's own scorers.

Each item is a one-entry dataset whose seed is derived from (task, version, split, index), so any peer
rebuilds it in microseconds without materialising a large dataset.
"""
from __future__ import annotations

import collections
import importlib.metadata

from node.errors import UnknownTaskError

from .base import Item, TaskRef, item_seed

PREFIX = "gym:"
CACHE = 4096  # items kept (a step scores the items it generated; received references are bounded too)


class GymTask:
    splits = ("train", "test")

    def __init__(self, name: str):
        import reasoning_gym  # imported lazily: ~1.5 s

        self.name = name
        self.gym_name = name[len(PREFIX):]
        self.version = importlib.metadata.version("reasoning-gym")
        self._rg = reasoning_gym
        try:
            reasoning_gym.create_dataset(self.gym_name, size=1, seed=0)
        except ValueError as err:  # reasoning-gym's error for an unknown name
            raise UnknownTaskError(f"unknown reasoning-gym task {self.gym_name!r} ({err})") from None
        self._entries: collections.OrderedDict = collections.OrderedDict()  # (split, index) -> (dataset, entry)

    def _entry(self, split: str, index: int):
        key = (split, index)
        if key in self._entries:
            self._entries.move_to_end(key)
        else:
            seed = item_seed(self.name, self.version, split, index)
            dataset = self._rg.create_dataset(self.gym_name, size=1, seed=seed)
            self._entries[key] = (dataset, dataset[0])
            if len(self._entries) > CACHE:
                self._entries.popitem(last=False)
        return self._entries[key]

    def item(self, split: str, index: int) -> Item:
        _, entry = self._entry(split, index)
        question = entry["question"]
        return Item(TaskRef(self.name, self.version, split, index), prompt=question, question=question,
                    answer=str(entry["answer"]))

    def score(self, item: Item, completion: str, finished: bool) -> float:
        if not finished:
            return 0.0
        dataset, entry = self._entry(item.ref.split, item.ref.index)
        return float(dataset.score_answer(completion.strip(), entry))
