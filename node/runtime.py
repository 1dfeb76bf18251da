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
