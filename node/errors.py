"""The user errors the CLI reports as one line (no traceback): bad configuration, model or task."""
from __future__ import annotations

from .config import ConfigError
from .models import ModelLoadError
from .tasks import UnknownTaskError

USER_ERRORS = (ConfigError, ModelLoadError, UnknownTaskError)
