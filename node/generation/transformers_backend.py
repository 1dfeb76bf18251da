"""The transformers backend: complete groups from the training model itself, with behaviour log-probs.

`model.generate` applies temperature and top-p as logits warpers *after* any custom processors, so a custom
processor would see unwarped scores. We therefore run generate with neutral sampling settings and apply
temperature, then top-p, then a recorder ourselves, as the last processors: the recorder keeps the
log-softmax of exactly the distribution `generate` samples from, and gathers the sampled token's entry one
step later (when the token is visible in `input_ids`). Only one [batch, vocab] row set is alive at a time,
so memory does not grow with vocabulary x length as `output_scores` would.

Sampling is exactly what the configuration says: `generate` fills every setting a call leaves unset from the
model's own generation_config (a hub model may ship repetition_penalty, top_k, min_p, ...), which would sample
from another distribution than the recorded and the learner's one. During our calls the model's
generation_config is a neutral one (token ids only), and restored afterwards (saved models keep theirs).
"""
from __future__ import annotations

import contextlib
import time

import torch
from transformers import GenerationConfig, LogitsProcessor, LogitsProcessorList
from transformers.generation.logits_process import TemperatureLogitsWarper, TopPLogitsWarper

from node.config import GenerationConfig as SamplingConfig

from .rollouts import Completion, Group, length_pieces, require_cap, split_completion, stop_ids


class _BehaviourRecorder(LogitsProcessor):
    def __init__(self):
        self.pending: torch.Tensor | None = None  # [B, V] log-probs of the step being sampled
        self.chosen: list[torch.Tensor] = []  # per step: [B] log-prob of the sampled token

    def __call__(self, input_ids, scores):
        if self.pending is not None:
            self.chosen.append(self.pending.gather(1, input_ids[:, -1:]).squeeze(1))
        self.pending = torch.log_softmax(scores.float(), dim=-1)
        return scores

    def finish(self, last_tokens: torch.Tensor) -> torch.Tensor:
        """[B, T] log-probs, given the last sampled column [B]."""
        if self.pending is not None:
            self.chosen.append(self.pending.gather(1, last_tokens[:, None]).squeeze(1))
        return torch.stack(self.chosen, dim=1)


@contextlib.contextmanager
def neutral_defaults(model):
    """The model's generation_config replaced by one holding only its special token ids, for the duration."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # peft: the wrapped model
    own = base.generation_config
    base.generation_config = GenerationConfig(bos_token_id=own.bos_token_id, eos_token_id=own.eos_token_id,
                                              pad_token_id=own.pad_token_id)
    try:
        yield
    finally:
        base.generation_config = own


def left_pad(prompts: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[pad_id] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    return ids, mask


class TransformersBackend:
    """Generates complete groups with a local transformers (or peft) model: the model being trained."""

    name = "transformers"

    def __init__(self, model, tokenizer, sampling: SamplingConfig):
        self.model = model
        self.tokenizer = tokenizer
        self.sampling = sampling
        require_cap(sampling.max_new_tokens)
        self.eos_ids, self.pad_id = stop_ids(model, tokenizer)

    def decode_slots(self, groups: list[Group]) -> int:
        """A batch (generate's length pieces of the groups' prompts) runs each of its sequences as long as its
        longest."""
        pieces = length_pieces([len(g.prompt_ids) for g in groups], self.sampling.length_pieces)
        return sum(sum(len(groups[i].completions) for i in piece) * max(max(groups[i].lengths, default=0)
                                                                           for i in piece) for piece in pieces)

    def sync(self, model) -> None:
        """Nothing to do: this backend samples from the training model itself."""

    def close(self) -> None:
        """Nothing to release."""

    def _generation_config(self, greedy: bool) -> GenerationConfig:
        # neutral settings: our own processors do temperature / top-p (see module docstring); greedy decoding
        # takes the arg max, which neither changes
        sampling = {"do_sample": False} if greedy else {"do_sample": True, "temperature": 1.0, "top_p": 1.0,
                                                         "top_k": 0}
        return GenerationConfig(**sampling, max_new_tokens=self.sampling.max_new_tokens, pad_token_id=self.pad_id,
                                eos_token_id=sorted(self.eos_ids))

    def generate(self, prompts: list[list[int]], group_size: int, seed: int,
                 greedy: bool = False) -> tuple[list[list[Completion]], float]:
        """G completions for each prompt; returns groups (in the prompts' order) and wall seconds. The prompts
        go in batches of similar length (generation.length_pieces; batch k seeded seed + k): a batch decodes
        until its longest completion ends, so short problems do not wait for long ones.
        greedy: the most likely token at each position instead of sampling (evaluation)."""
        pieces = length_pieces([len(p) for p in prompts], self.sampling.length_pieces)
        groups: list[list[Completion]] = [[] for _ in prompts]
        seconds = 0.0
        for k, piece in enumerate(pieces):
            part, spent = self._generate([prompts[i] for i in piece], group_size, seed + k, greedy)
            for i, group in zip(piece, part, strict=True):
                groups[i] = group
            seconds += spent
        return groups, seconds

    @torch.no_grad()
    def _generate(self, prompts: list[list[int]], group_size: int, seed: int,
                  greedy: bool) -> tuple[list[list[Completion]], float]:
        """G completions for each prompt in one batched generate call, and its wall seconds."""
        batch = [p for p in prompts for _ in range(group_size)]
        input_ids, attention = (t.to(self.model.device) for t in left_pad(batch, self.pad_id))
        recorder = _BehaviourRecorder()
        processors = LogitsProcessorList([TemperatureLogitsWarper(self.sampling.temperature)])
        if self.sampling.top_p < 1.0:
            processors.append(TopPLogitsWarper(self.sampling.top_p))
        processors.append(recorder)
        torch.manual_seed(seed)
        was_training = self.model.training
        self.model.eval()
        start = time.perf_counter()
        with neutral_defaults(self.model):
            out = self.model.generate(input_ids=input_ids, attention_mask=attention, logits_processor=processors,
                                      generation_config=self._generation_config(greedy))
        seconds = time.perf_counter() - start
        if was_training:
            self.model.train()
        new_tokens = out[:, input_ids.shape[1]:]
        logprobs = recorder.finish(new_tokens[:, -1])
        groups = []
        for g in range(len(prompts)):
            group = []
            for row in range(g * group_size, (g + 1) * group_size):
                ids, lps, reason = split_completion(new_tokens[row].tolist(), logprobs[row].tolist(), self.eos_ids)
                text = self.tokenizer.decode(ids, skip_special_tokens=True)
                group.append(Completion(ids, lps, reason, text))
            groups.append(group)
        return groups, seconds
