"""The errors a user sees as one line (no traceback), and how an exception is said in one line.

A leaf: imports nothing of the project, so any module can raise these without an import cycle.
"""
from __future__ import annotations


class ConfigError(ValueError):
    """An invalid configuration value; the message names the field."""


class ModelLoadError(ValueError):
    """A model that cannot be found or loaded; the message says which and why."""


class UnknownTaskError(ValueError):
    """A task name (or task reference) that this peer cannot rebuild."""


class TaskDataError(ValueError):
    """A task's dataset that cannot be found or loaded (offline hub, missing data_files); says what to do."""


class BackendUnavailable(RuntimeError):
    """A generation backend that cannot run here (e.g. vLLM not installed); the message says what to do."""


class PortInUse(OSError):
    """A port this node was told to listen on is taken (by another node or any other program)."""


class IdentityInUse(RuntimeError):
    """Another running node holds this identity file (two processes would be one peer to the swarm)."""


class IdentityCorrupt(ValueError):
    """An identity file (or its record-signing key beside it) exists but is not a key this node can read."""


class SwarmUnreachable(RuntimeError):
    """The DHT could not start or reach any initial peer; the message says which."""


class Stopped(RuntimeError):
    """A stop signal arrived before the work began (while starting, joining, waiting); the message says
    "while ...", and the command ends with exit code 0."""


USER_ERRORS = (ConfigError, ModelLoadError, UnknownTaskError, TaskDataError, BackendUnavailable, PortInUse,
               IdentityInUse, IdentityCorrupt)  # exit 2
UNREACHABLE_ERRORS = (SwarmUnreachable,)  # exit 3


def first_line(err: BaseException) -> str:
    """The first line of an exception's message (its type name when the message is empty)."""
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__
