"""The zoo's tokenizers: the shared character tokenizer, and a second one learnt by BPE.

- "char": one token per printable ASCII character. Most zoo models use it, so they share token ids exactly (as
  the F-TIS paper's Qwen2.5 peers do). A real `PreTrainedTokenizerFast` (a BPE with no merges), so it saves and
  loads like any hub tokenizer.
- "bpe": a byte-pair-encoding vocabulary of `BPE_VOCAB` tokens over the same alphabet, learnt with the
  `tokenizers` library from a seeded corpus of the project's own task text (merges such as "1", "12", "+1"):
  other ids, other boundaries, the same text. A peer using it shares no token ids with the "char" peers, as a
  SmolLM2 or Qwen peer would not: what cross-tokenizer training (node/rl/transfer, sequence rows) is for.
"""
from __future__ import annotations

import hashlib
import json
import random

SPECIAL_TOKENS = ("<pad>", "<eos>", "<unk>")
CHARACTERS = tuple(chr(i) for i in range(32, 127)) + ("\n",)
KINDS = ("char", "bpe")
BPE_VOCAB = 160  # tokens of the learnt BPE vocabulary (specials and the 96 characters included)
BPE_CORPUS = (4096, 0)  # (lines, seed) of the task text the merges are learnt from
BPE_TASKS = ("arith-add", "arith-sub", "count")


def _wrap(backend):
    from tokenizers import decoders
    from transformers import PreTrainedTokenizerFast

    backend.decoder = decoders.Fuse()  # tokens join without spaces
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", eos_token="<eos>",
                                   unk_token="<unk>", model_max_length=256)


def bpe_corpus(lines: int = BPE_CORPUS[0], seed: int = BPE_CORPUS[1]) -> list[str]:
    """Prompts with their answers from both splits of the project's tasks, seeded (nothing downloaded)."""
    from node.tasks import get_task

    rng = random.Random(seed)
    tasks = [get_task(name) for name in BPE_TASKS]
    text = []
    for i in range(lines):
        task = tasks[i % len(tasks)]
        item = task.item(("train", "test")[i % 2], rng.randrange(2**31))
        text.append(item.prompt + item.answer)
    return text


def build_tokenizer(kind: str = "char"):
    """The zoo tokenizer of this kind ("char" or "bpe"); building is deterministic."""
    from tokenizers import Tokenizer, models, trainers

    if kind not in KINDS:
        raise ValueError(f"tokenizer kind must be one of {', '.join(KINDS)}, got {kind!r}")
    if kind == "char":
        vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS + CHARACTERS)}
        return _wrap(Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>")))
    backend = Tokenizer(models.BPE(unk_token="<unk>"))  # no pre-tokenizer: merges may span digits and signs
    trainer = trainers.BpeTrainer(vocab_size=BPE_VOCAB, special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=list(CHARACTERS), limit_alphabet=len(CHARACTERS),
                                  show_progress=False)
    backend.train_from_iterator(bpe_corpus(), trainer)
    return _wrap(backend)


def tokenizer_fingerprint(tokenizer) -> str:
    """Hash of the vocabulary and special tokens: equal fingerprints mean token ids mean the same thing."""
    vocab = sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1])
    special = {"eos": tokenizer.eos_token_id, "pad": tokenizer.pad_token_id}
    blob = json.dumps([vocab, special], ensure_ascii=True).encode()
    return hashlib.sha256(blob).hexdigest()[:16]
