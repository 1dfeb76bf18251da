"""GSM8K and MATH-500 through `datasets`, answers checked with math-verify.

Online users get the hub datasets; offline (and in the tests) `data_files` points at a local JSONL or
parquet file in the dataset's own format, such as the fixtures `write_fixture` makes.
"""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from .base import Item, TaskRef

# name -> (hub id, hub config, split map, question column, gold-answer extractor)
_SPECS = {
    "gsm8k": ("openai/gsm8k", "main", {"train": "train", "test": "test"}, "question",
              lambda row: row["answer"].split("####")[-1].strip().replace(",", "")),
    "math500": ("HuggingFaceH4/MATH-500", None, {"train": "test", "test": "test"}, "problem",
                lambda row: row["answer"]),
}
INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."


@lru_cache(maxsize=8)
def _load_rows(name: str, split: str, data_files: str):
    """The dataset's rows; a dataset that cannot be had is one TaskDataError line saying what to do."""
    import datasets

    from node.errors import TaskDataError, first_line
    from node.system.runtime import hub_offline_reason

    hub_id, config, split_map, _, _ = _SPECS[name]
    if data_files:
        if not Path(data_files).expanduser().is_file():
            raise TaskDataError(f"task.data_files {data_files!r} (for task {name!r}) is not a file")
        kind = "parquet" if data_files.endswith(".parquet") else "json"
        try:
            return datasets.load_dataset(kind, data_files=str(Path(data_files).expanduser()), split="train")
        except (OSError, ValueError) as err:  # datasets' own errors derive from these
            raise TaskDataError(f"task.data_files {data_files!r} could not be read as {kind}: "
                                f"{first_line(err)}") from None
    offline = hub_offline_reason()  # "" when the hub answers
    try:
        return datasets.load_dataset(hub_id, config, split=split_map[split])
    except (OSError, ValueError) as err:  # ConnectionError, FileNotFoundError, DatasetNotFoundError, ...
        why = f"{offline} and it is not cached" if offline else first_line(err)
        raise TaskDataError(f"task {name!r} needs the dataset {hub_id!r}: {why}; offline, give a local copy in "
                            f"its own format with --set task.data_files=<file.jsonl or .parquet>") from None


class HubMathTask:
    splits = ("train", "test")

    def __init__(self, name: str, data_files: str = ""):
        self.name = name
        self.data_files = data_files
        self.version = "local:" + Path(data_files).name if data_files else "hub"
        self._question_key, self._gold = _SPECS[name][3], _SPECS[name][4]

    def item(self, split: str, index: int) -> Item:
        rows = _load_rows(self.name, split, self.data_files)
        row = rows[index % len(rows)]
        question = f"{row[self._question_key]}\n{INSTRUCTION}"
        return Item(TaskRef(self.name, self.version, split, index), prompt=question, question=question,
                    answer=self._gold(row))

    def score(self, item: Item, completion: str, finished: bool) -> float:
        from math_verify import parse, verify

        if not finished:
            return 0.0
        gold = parse(f"${item.answer}$") or parse(item.answer)
        return 1.0 if verify(gold, parse(completion)) else 0.0


_FIXTURES = {
    "gsm8k": [
        {"question": "Tom has 3 apples and buys 4 more. How many apples does he have?",
         "answer": "He has 3 + 4 = <<3+4=7>>7 apples.\n#### 7"},
        {"question": "A box holds 12 pens. How many pens are in 5 boxes?",
         "answer": "5 * 12 = <<5*12=60>>60 pens.\n#### 60"},
        {"question": "Ann earns 1,250 dollars a week. How much does she earn in 2 weeks?",
         "answer": "2 * 1250 = <<2*1250=2500>>2500.\n#### 2,500"},
    ],
    "math500": [
        {"problem": "What is $\\frac{1}{4} + \\frac{1}{4}$?", "solution": "It is $\\boxed{\\frac{1}{2}}$.",
         "answer": "\\frac{1}{2}", "subject": "Prealgebra", "level": 1, "unique_id": "fixture/0.json"},
        {"problem": "Solve $2x = 10$ for $x$.", "solution": "$x = \\boxed{5}$.", "answer": "5",
         "subject": "Algebra", "level": 1, "unique_id": "fixture/1.json"},
    ],
}


def write_fixture(name: str, path: str | Path) -> Path:
    """Writes a small JSONL file in the hub dataset's own column format (for offline tests)."""
    path = Path(path)
    path.write_text("".join(json.dumps(row) + "\n" for row in _FIXTURES[name]))
    return path
