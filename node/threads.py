"""torch thread control: on 2 busy cores, more than one thread per process runs 20-40x slower."""
from __future__ import annotations

import contextlib


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
