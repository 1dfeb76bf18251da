"""The zoo's small shared tokenizer: one token per printable ASCII character.

Every zoo model uses it, so zoo peers share token ids exactly (as the F-TIS paper's Qwen2.5 peers do). It is
a real `PreTrainedTokenizerFast` (a BPE with no merges), so it saves and loads like any hub tokenizer.
"""
from __future__ import annotations

import hashlib
import json

SPECIAL_TOKENS = ("<pad>", "<eos>", "<unk>")
CHARACTERS = tuple(chr(i) for i in range(32, 127)) + ("\n",)


def build_tokenizer():
    from tokenizers import Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS + CHARACTERS)}
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    backend.decoder = decoders.Fuse()  # characters join without spaces
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", eos_token="<eos>",
                                   unk_token="<unk>", model_max_length=256)


def tokenizer_fingerprint(tokenizer) -> str:
    """Hash of the vocabulary and special tokens: equal fingerprints mean token ids mean the same thing."""
    vocab = sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1])
    special = {"eos": tokenizer.eos_token_id, "pad": tokenizer.pad_token_id}
    blob = json.dumps([vocab, special], ensure_ascii=True).encode()
    return hashlib.sha256(blob).hexdigest()[:16]
