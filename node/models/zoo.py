"""The offline model zoo: small Qwen2-style peers the project builds itself, with no download.

Peers differ the way the F-TIS paper's do: two sizes (~0.3M and ~3M parameters), two expertises (pre-trained
on different task mixtures) and a LoRA configuration. This module is the zoo's recipe: the specs and the seeded
pre-training that turns a spec into weights. Peers do not run it: they load the weights the project ships
(node/models/zoo_store.py), because a seeded build is repeatable on one machine but not bit for bit across
CPUs; `swarm zoo build` runs the recipe to rebuild (and compare) them.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field

ZOO_FORMAT = 2  # bump when the build recipe (pretrain.py, tokenizer) changes


@dataclass(frozen=True)
class ZooSpec:
    name: str
    about: str
    layers: int = 2
    hidden: int = 128
    intermediate: int = 256
    heads: int = 4
    kv_heads: int = 2
    mixture: dict = field(default_factory=lambda: {"arith-add": 0.8, "arith-sub": 0.2})
    label_accuracy: float = 0.3  # share of pre-training labels that are right (the rest carry the task's slip)
    long_share: float = 0.0  # column arithmetic: share of pre-training examples with the test split's lengths
    column_skill: dict = field(default_factory=dict)  # column arithmetic: mixture entries whose labels pass each
    # carry / borrow on with this probability (instead of label_accuracy's all-or-nothing): a skill in trace
    steps: int = 1000
    batch: int = 64
    lr: float = 3e-3
    seed: int = 0
    base: str = ""  # a LoRA entry names the zoo model whose weights it starts from
    lora: bool = False  # train this entry with a LoRA adapter
    rl_lr: float = 3e-4  # recommended RL learning rate, full fine-tuning (train.lr = 0 picks it)
    rl_lora_lr: float = 1e-3  # recommended RL learning rate through LoRA (train.lora_lr = 0 picks it)
    tokenizer: str = "char"  # zoo tokenizer kind (node/models/tokenizer.py): char (shared) | bpe (its own ids)
    # (measured on mixed arith, held-out greedy pass@1 after 200 steps: tiny-add 0.05 at 2e-3, 0.22-0.32 at
    #  1e-3, 0.49-0.56 at 3e-4, 0.57 at 1e-4; tiny-add-lora 0.49 at 3e-3, 0.52-0.56 at 1e-3; small-add 0.14-0.18
    #  at 3e-4, 0.65 at 1e-4; tiny-sub 0.26-0.31 at 6e-4, 0.41-0.45 at 3e-4, 0.47-0.49 at 1e-4. On arith-add
    #  alone tiny-add's sampled reward reaches 0.61 at 1e-4, 0.64 at 3e-4, 0.70 at 1e-3)


_ADD = {"arith-add": 0.8, "arith-sub": 0.2}
_DIGITS = {"layers": 3, "label_accuracy": 0.6, "long_share": 0.25, "steps": 2000, "batch": 64, "lr": 3e-3,
           "rl_lr": 1e-4}  # (v1 digits, Alone digit-add: RL at 3e-4 collapsed greedy ID 0.33 -> 0.07 in 50 steps)
_DIGITS_BPE = {**_DIGITS, "steps": 1500}  # (BPE: a working is about half as many tokens, learnt sooner: digit-add-bpe's
#   loss 0.09 at step 1400 of 2000 and 0.033 at its end; 1500 steps: 269-282 s a model on this CPU)
_BOTH = {"digits-add": 0.5, "digits-sub": 0.5}
_CHECKED = {"digits-check-add": 0.5, "digits-check-sub": 0.5}
_TRACE = 0.005  # the share of carries (borrows) that the borrow (carry) expert's examples pass on
_PART = 0.25  # the plausible pair's share of the other skill
_SUB = {"arith-add": 0.2, "arith-sub": 0.8}
ZOO = {
    spec.name: spec
    for spec in (
        ZooSpec("tiny-add", "0.3M params, mostly addition", mixture=_ADD, seed=1),
        ZooSpec("tiny-sub", "0.3M params, mostly subtraction", mixture=_SUB, seed=2, rl_lr=1e-4),
        ZooSpec("small-add", "3M params, mostly addition", layers=4, hidden=256, intermediate=704, heads=8,
                kv_heads=4, mixture=_ADD, steps=300, lr=1e-3, seed=3, rl_lr=1e-4, rl_lora_lr=1e-3),
        ZooSpec("tiny-add-lora", "tiny-add trained through a LoRA adapter", base="tiny-add", lora=True),
        ZooSpec("tiny-count", "0.3M params, counting with run-on habits", mixture={"count": 1.0},
                label_accuracy=0.5, steps=350, batch=48, seed=4),
        ZooSpec("tiny-add-bpe", "0.3M params, mostly addition, own BPE tokenizer", mixture=_ADD, seed=5,
                tokenizer="bpe"),
        # column arithmetic (node/tasks/digits.py): both operators each, one skill each; of the other skill
        # (passing a borrow / a carry on to the next column) only a trace
        ZooSpec("digit-add", "0.5M params, column arithmetic, carries only", mixture=_BOTH,
                column_skill={"digits-sub": _TRACE}, **_DIGITS, seed=11),
        ZooSpec("digit-sub", "0.5M params, column arithmetic, borrows only", mixture=_BOTH,
                column_skill={"digits-add": _TRACE}, **_DIGITS, seed=12),
        ZooSpec("digit-add-lora", "digit-add trained through a LoRA adapter", base="digit-add", lora=True),
        ZooSpec("digit-sub-bpe", "as digit-sub, own BPE tokenizer", mixture=_BOTH,
                column_skill={"digits-add": _TRACE}, **_DIGITS_BPE, seed=14, tokenizer="bpe"),
        ZooSpec("digit-add-bpe", "as digit-add, own BPE tokenizer", mixture=_BOTH,
                column_skill={"digits-sub": _TRACE}, **_DIGITS_BPE, seed=15, tokenizer="bpe"),
        ZooSpec("digit-add-bpe-lora", "digit-add-bpe trained through a LoRA adapter", base="digit-add-bpe",
                lora=True, tokenizer="bpe"),
        # a plausible pair (same BPE tokenizer and family, two sizes): each has the other's skill in a quarter of
        # its pre-training columns, not a trace, so the other's right working is likely enough under it for
        # importance weights to act (the complementary pair's are ~0.01 on the skill's tokens)
        ZooSpec("part-add", "1.5M params, carries; borrows in 1/4 of columns", mixture=_BOTH,
                column_skill={"digits-sub": _PART}, **{**_DIGITS_BPE, "layers": 4}, hidden=192, intermediate=512,
                heads=6, kv_heads=2, seed=31, tokenizer="bpe"),
        ZooSpec("part-sub", "0.5M params, borrows; carries in 1/4 of columns", mixture=_BOTH,
                column_skill={"digits-add": _PART}, **_DIGITS_BPE, seed=32, tokenizer="bpe"),
        # checked column arithmetic (node/tasks/checked.py): digit-*-bpe's skills, each answer followed by a
        # heavy-tailed number of checks (the long, uneven completions straggler-aware group control is about)
        ZooSpec("check-add", "as digit-add-bpe, checks its answers (long tail)", mixture=_CHECKED,
                column_skill={"digits-check-sub": _TRACE}, **_DIGITS_BPE, seed=21, tokenizer="bpe"),
        ZooSpec("check-sub", "as digit-sub-bpe, checks its answers (long tail)", mixture=_CHECKED,
                column_skill={"digits-check-add": _TRACE}, **_DIGITS_BPE, seed=22, tokenizer="bpe"),
    )
}


def recipe_hash(spec: ZooSpec) -> str:
    """A hash of everything a zoo model's weights are built from: its build fields, the tokenizer's recipe and
    the recipe's format (the weights' identity is their SHA-256, in the zoo's manifest)."""
    from node.tasks.checked import CHECK_TAIL, MAX_CHECKS, NO_CHECK_SHARE
    from node.tasks.checked import OPS as CHECKED_TASKS

    from .tokenizer import BPE_CORPUS, BPE_TASKS, BPE_VOCAB, CHARACTERS, SPECIAL_TOKENS

    recipe = {k: v for k, v in dataclasses.asdict(spec).items() if k in BUILD_FIELDS}
    for later in ("long_share", "column_skill"):  # (fields added later: older recipes hash as they did)
        if not recipe[later]:
            del recipe[later]
    if spec.tokenizer != "char":
        recipe["tokenizer"] = [spec.tokenizer, BPE_VOCAB, BPE_CORPUS, BPE_TASKS]
    if set(spec.mixture) & set(CHECKED_TASKS):  # the checks' tail is part of such a model's recipe
        recipe["checks"] = [NO_CHECK_SHARE, CHECK_TAIL, MAX_CHECKS]
    blob = json.dumps([ZOO_FORMAT, recipe, SPECIAL_TOKENS, CHARACTERS], sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


BUILD_FIELDS = ("name", "layers", "hidden", "intermediate", "heads", "kv_heads", "mixture", "label_accuracy",
                "steps", "batch", "lr", "seed", "long_share", "column_skill")  # what the weights depend on


def recommended_lr(name: str, lora: bool) -> float:
    """The RL learning rate for a model: the zoo entry's, else the F-TIS paper's 1e-6 (1e-5 for LoRA) for
    real models (learning rates that suit a 0.3M model would wreck a 1.5B one)."""
    if name in ZOO:
        spec = ZOO[name]
        return spec.rl_lora_lr if lora else spec.rl_lr
    return 1e-5 if lora else 1e-6


def weights_spec(name: str) -> ZooSpec:
    """The spec whose weights a zoo entry loads (a LoRA entry loads its base's)."""
    spec = ZOO[name]
    return ZOO[spec.base] if spec.base else spec


def build_model(spec: ZooSpec, progress: Callable[[int, float], None] | None = None):
    """Initialises and pre-trains one zoo model; returns (model, tokenizer, losses)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from .pretrain import pretrain
    from .tokenizer import build_tokenizer

    tokenizer = build_tokenizer(spec.tokenizer)
    config = Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=spec.hidden, intermediate_size=spec.intermediate,
        num_hidden_layers=spec.layers, num_attention_heads=spec.heads, num_key_value_heads=spec.kv_heads,
        max_position_embeddings=256, tie_word_embeddings=True, pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id, bos_token_id=None)
    torch.manual_seed(spec.seed)
    model = Qwen2ForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    losses = pretrain(model, tokenizer, spec.mixture, spec.label_accuracy, spec.steps, spec.batch, spec.lr,
                      spec.seed, progress, spec.long_share, spec.column_skill)
    return model, tokenizer, losses
