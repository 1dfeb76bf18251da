"""Task registry: a task name (plus options) -> a Task that rebuilds items from task references."""
from __future__ import annotations

from node.errors import UnknownTaskError

from .arith import _OPS as _ARITH_NAMES
from .arith import WIDE_OPS as _WIDE_NAMES
from .arith import WORK_OPS as _WORK_NAMES
from .arith import ArithmeticTask, WideArithmeticTask, WorkedArithmeticTask
from .base import Item, Task, TaskRef, checks_work, completion_cap, item_seed
from .checked import OPS as _CHECKED_NAMES
from .checked import CheckedDigitsTask
from .count import CountTask
from .digits import OPS as _DIGITS_NAMES
from .digits import DigitsTask
from .gym import PREFIX as GYM_PREFIX
from .hub_math import _SPECS as _HUB_NAMES

__all__ = ["Item", "Task", "TaskRef", "checks_work", "completion_cap", "get_task", "item_seed", "offline_task",
           "task_names"]
# built from the name alone, offline, in microseconds
OFFLINE = (*_ARITH_NAMES, *_WIDE_NAMES, *_WORK_NAMES, *_DIGITS_NAMES, *_CHECKED_NAMES, "count")


def task_names() -> list[str]:
    return [*_DIGITS_NAMES, *_CHECKED_NAMES, *_ARITH_NAMES, *_WIDE_NAMES, *_WORK_NAMES, "count", *_HUB_NAMES,
            f"{GYM_PREFIX}<reasoning-gym task, e.g. chain_sum>"]


def get_task(name: str, data_files: str = "") -> Task:
    """Builds a task by name; raises UnknownTaskError with the known names."""
    if name in _ARITH_NAMES:
        return ArithmeticTask(name)
    if name in _WIDE_NAMES:
        return WideArithmeticTask(name)
    if name in _WORK_NAMES:
        return WorkedArithmeticTask(name)
    if name in _DIGITS_NAMES:
        return DigitsTask(name)
    if name in _CHECKED_NAMES:
        return CheckedDigitsTask(name)
    if name == "count":
        return CountTask()
    if name in _HUB_NAMES:
        from .hub_math import HubMathTask

        return HubMathTask(name, data_files)
    if name.startswith(GYM_PREFIX):
        from .gym import GymTask

        return GymTask(name)
    raise UnknownTaskError(f"unknown task {name!r} (known: {', '.join(task_names())})")


def offline_task(name: str) -> Task | None:
    """The task if any peer can build it offline in microseconds (procedural, no data, no imports), else
    None: a received task reference names such a task or this peer's own, never one to load or download."""
    return get_task(name) if name in OFFLINE else None
