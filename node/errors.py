"""The errors the CLI reports as one line (no traceback)."""
from __future__ import annotations

from .config import ConfigError
from .models import ModelLoadError
from .process import IdentityInUse, PortInUse
from .swarm_dht import SwarmUnreachable  # light: hivemind is imported only when a DHT starts
from .tasks import UnknownTaskError


class BackendUnavailable(RuntimeError):
    """A generation backend that cannot run here (e.g. vLLM not installed); the message says what to do."""


USER_ERRORS = (ConfigError, ModelLoadError, UnknownTaskError, BackendUnavailable, PortInUse, IdentityInUse)  # exit 2
UNREACHABLE_ERRORS = (SwarmUnreachable,)  # exit 3
