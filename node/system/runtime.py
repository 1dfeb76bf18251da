"""The process's runtime settings: torch threads and library chatter.

On 2 busy cores, more than one torch thread per process runs 20-40x slower; progress bars and info logs of
transformers / the hub would break our own progress display.
"""
from __future__ import annotations

import contextlib
import os


def set_threads(n: int) -> None:
    import torch

    torch.set_num_threads(n)


@contextlib.contextmanager
def single_thread():
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def quiet_libraries() -> None:
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


def hub_reachable(timeout: float = 3.0) -> bool:
    """Whether the Hugging Face hub (HF_ENDPOINT, default huggingface.co) accepts a TCP connection."""
    import socket
    from urllib.parse import urlparse

    url = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    try:
        with socket.create_connection((url.hostname, url.port or (443 if url.scheme == "https" else 80)), timeout):
            return True
    except OSError:
        return False


def hub_offline() -> bool:
    """Whether the user put the hub libraries in offline mode (HF_HUB_OFFLINE)."""
    return os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")


_switched_offline = False  # set when offline_unless_hub_reachable turned cache-only mode on (not the user)


def hub_offline_reason() -> str:
    """Why the hub libraries run cache-only, or "" when they do not: the user's HF_HUB_OFFLINE, or a hub that
    cannot be reached (which switches cache-only mode on, see offline_unless_hub_reachable)."""
    if hub_offline() and not _switched_offline:
        return "HF_HUB_OFFLINE is set"
    return "the hub cannot be reached from here" if offline_unless_hub_reachable() else ""


def offline_unless_hub_reachable() -> bool:
    """Cache-only mode for the hub libraries when the hub cannot be reached (returns True then): a model or
    dataset that is cached loads as before, one that is not fails at once with one error, instead of minutes
    of retries and dozens of warnings. Nothing changes where the hub answers or offline mode is set already."""
    import sys

    offline = hub_offline()
    if offline or hub_reachable():
        return offline
    global _switched_offline
    _switched_offline = True
    os.environ["HF_HUB_OFFLINE"] = "1"
    if "huggingface_hub" in sys.modules:  # read once at import: set the imported copies too
        sys.modules["huggingface_hub"].constants.HF_HUB_OFFLINE = True
    if "datasets" in sys.modules:
        sys.modules["datasets"].config.HF_HUB_OFFLINE = True
    return True
