"""Generation: complete groups of completions with the behaviour log-probs of what was sampled.

Two backends behind one seam (`GenerationBackend`): transformers (the training model itself,
transformers_backend.py) and vLLM (an engine that follows the training weights, vllm_backend.py, the only
vLLM importer). `make_backend` picks one from `generation.backend`; both are imported only when chosen.
"""
from __future__ import annotations

from typing import Protocol

from node.config import GenerationConfig

from .rollouts import Completion, Group


class GenerationBackend(Protocol):
    name: str  # "transformers" | "vllm"
    eos_ids: set[int]
    pad_id: int

    def generate(self, prompts: list[list[int]], group_size: int, seed: int,
                 greedy: bool = False) -> tuple[list[list[Completion]], float]:
        """G completions for each prompt (greedy: the most likely continuation, for evaluation); returns the
        groups and the wall seconds of generation."""
        ...

    def decode_slots(self, groups: list[Group]) -> int:
        """Decode slots a step's generation of these groups spent (a padded batch runs each of its sequences as
        long as its longest; continuous batching frees a sequence's slot when it ends)."""
        ...

    def sync(self, model) -> None:
        """Makes the next generate sample from `model`'s current weights (after each optimiser step)."""
        ...

    def close(self) -> None: ...


def make_backend(sampling: GenerationConfig, loaded, seed: int = 0) -> GenerationBackend:
    """The generation backend named by `generation.backend` for a loaded model (node/models.LoadedModel)."""
    if sampling.backend == "vllm":
        from .vllm_backend import VLLMBackend

        return VLLMBackend(loaded.model, loaded.tokenizer, sampling, lora=loaded.lora, seed=seed)
    from .transformers_backend import TransformersBackend

    return TransformersBackend(loaded.model, loaded.tokenizer, sampling)
