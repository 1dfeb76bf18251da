"""The transfer policies by name, and the one place a peer's policy is chosen and built."""
from __future__ import annotations

import dataclasses
import difflib
import functools
import importlib
import pkgutil
import typing

from node.config import TransferConfig, coerce_value
from node.errors import ConfigError

from . import policies
from .base import TransferPolicy

AUTO = "auto"


def resolve(name: str, checks_work: bool) -> str:
    """The policy `auto` stands for, by task: verified-imitation where the task's verifier checks the work (a
    partner's right answer is then right for its reasons: measured to gain on digits, docs/RESULTS.md), else f-tis
    (the paper's rule: where only the answer is checked, text made up before a right one would be imitated)."""
    if name != AUTO:
        return name
    return "verified-imitation" if checks_work else "f-tis"


@functools.cache
def registry() -> dict[str, type[TransferPolicy]]:
    """Every policy class under node/rl/transfer/policies that names itself (`name` in its own class body): a new
    policy lands as one module there."""
    found = {}
    for module in pkgutil.iter_modules(policies.__path__):
        loaded = importlib.import_module(f"{policies.__name__}.{module.name}")
        for obj in vars(loaded).values():
            if isinstance(obj, type) and issubclass(obj, TransferPolicy) and vars(obj).get("name"):
                if obj.name in found and found[obj.name] is not obj:
                    raise RuntimeError(f"two transfer policies are named {obj.name!r}")
                found[obj.name] = obj
    return dict(sorted(found.items()))


def policy_names() -> list[str]:
    return list(registry())


def build_policy(cfg: TransferConfig, checks_work: bool) -> TransferPolicy:
    """The policy cfg names (auto resolved for a task whose verifier does or does not check the work), its
    settings from cfg.options (each checked against the policy's own, with the field's type); ConfigError else."""
    name = resolve(cfg.policy, checks_work)
    classes = registry()
    if name not in classes:
        near = difflib.get_close_matches(name, list(classes), n=1)
        hint = f"; did you mean {near[0]}?" if near else ""
        raise ConfigError(f"transfer.policy {name!r} is not a transfer policy (policies: {AUTO}, "
                          f"{', '.join(classes)}){hint}")
    cls = classes[name]
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init and f.name not in cls.ignores}
    hints = typing.get_type_hints(cls)
    values = {}
    for key, raw in cfg.options:
        if key not in fields:
            known = ", ".join(fields) or "none"
            raise ConfigError(f"transfer.{key} is not a setting of policy {name} (its settings: {known})")
        values[key] = coerce_value("transfer", key, hints[key], raw)
    return cls(**values)


def resolved_config(policy: TransferPolicy) -> TransferConfig:
    """The [transfer] table that builds this policy again: its name and the settings that differ from its
    defaults (what a peer writes into its resolved configuration)."""
    return TransferConfig(policy.name, tuple(sorted(policy.changed().items())))
