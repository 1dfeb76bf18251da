"""Loading a peer's model: a zoo name, a local directory, a hub name, a packaged real model (SmolLM2, Gemma 3:
packaged.py), or what a peer saved (an output directory, a checkpoint, or the model folder inside either).

All paths end in `from_pretrained`, so the same code serves the tiny zoo and a real model such as
Qwen/Qwen2.5-0.5B-Instruct for users who have the hub. A saved model folder holds `swarm-model.json` beside
the weights: the base it came from, whether the folder is a LoRA adapter (then only the adapter is saved and
the base is loaded by name under it) and the learning rate that trained it (kept when training goes on).
Another peer's tokenizer is loaded here too, from what its card names (`source_of`, `resolve_source`), and only
from what this machine has.
"""
from __future__ import annotations

import dataclasses
import functools
import json
from dataclasses import dataclass
from pathlib import Path

from node.config import EvalConfig, ModelConfig, TaskConfig
from node.errors import ModelLoadError, first_line
from node.models.packaged import (
    PACKAGED,
    SMOLLM2,
    copy_ready,
    float_copy,
    gguf_tokenizer,
    smollm2_location,
)
from node.models.saved import CHECKPOINTS, checkpoint_step, checkpoints, latest_checkpoint

MODEL_META = "swarm-model.json"  # beside saved weights: {"base", "lora", "lr", "task", "eval"}
GENERIC_TOKENIZERS = ("TokenizersBackend", "PreTrainedTokenizerFast")  # classes of tokenizers saved from `tokenizers`


@dataclass
class LoadedModel:
    model: object  # a transformers causal LM (a peft model when lora is on)
    tokenizer: object
    source: str  # "zoo", "local", "hub", "gguf" or "saved" (a peer's output or checkpoint)
    lora: bool
    base: str = ""  # the zoo, hub or local name the weights descend from (saved with them)
    trained_lr: float = 0.0  # a saved model's learning rate (0: not known)


def saved_model_folder(name: str) -> Path | None:
    """The model folder a peer saved, for a name that is one or holds one: the folder itself, an output or
    checkpoint directory (its `model/`), or an output whose run never finished (its newest valid
    checkpoint's model). None for anything else (zoo, hub, plain model directories)."""
    path = Path(name).expanduser()
    if not path.is_dir():
        return None
    if (path / MODEL_META).exists():
        return path
    if (path / "model" / MODEL_META).exists():  # the model a finished run saved, unless a run resumed since has
        found = latest_checkpoint(path) if (path / CHECKPOINTS).is_dir() else None  # a newer checkpoint
        if found is not None and found.path is not None and found.step > saved_steps(path / "model"):
            return found.path / "model"
        return path / "model"
    if (path / "model" / "config.json").exists():  # an output of an earlier version (no swarm-model.json)
        return None
    if (path / CHECKPOINTS).is_dir():
        found = latest_checkpoint(path)
        if found.path is None:
            raise ModelLoadError(f"{name!r} holds no model and no valid checkpoint"
                                 + (f" ({found.skipped[0]})" if found.skipped else ""))
        return found.path / "model"
    return None


def trained_on(task: TaskConfig, evaluation: EvalConfig, steps: int = 0, accuracy: dict | None = None,
               swarm: str = "", transfer: str = "") -> dict:
    """What a model was trained on, for swarm-model.json: the task and how it was evaluated (`swarm eval` of
    the saved model defaults to them: `eval_defaults`), its steps, its latest held-out accuracy, the swarm
    it trained with ("" alone) and the transfer policy that decided what received groups taught it: what
    `swarm export` writes into the model card."""
    return {"task": {"name": task.name, "data_files": task.data_files},
            "eval": {"task": evaluation.task, "prompts": evaluation.prompts, "samples": evaluation.samples,
                     "splits": list(evaluation.splits)},
            "steps": steps, "accuracy": dict(accuracy or {}), "swarm": swarm, "transfer": transfer}


def eval_defaults(meta: dict) -> dict[str, dict]:
    """Configuration defaults (sections task and eval) from a saved model's swarm-model.json: what it was
    trained on; {} for a model saved before the task was recorded. Settings given by the user win."""
    task, evaluation = meta.get("task"), meta.get("eval")
    if not isinstance(task, dict) or not isinstance(task.get("name"), str):
        return {}
    defaults = {"task": {"name": task["name"], "data_files": task.get("data_files") or ""}}
    if isinstance(evaluation, dict):
        defaults["eval"] = {k: v for k, v in evaluation.items() if k in ("task", "prompts", "samples", "splits")}
    return defaults


def skipped_checkpoints(name: str) -> list[str]:
    """One line per checkpoint newer than what loading `name` takes that it passes over as invalid: an output
    directory is loaded from the newest of its saved model and its valid checkpoints (`saved_model_folder`);
    [] otherwise."""
    path = Path(name).expanduser()
    if not path.is_dir() or (path / MODEL_META).exists() or not (path / CHECKPOINTS).is_dir():
        return []
    found = latest_checkpoint(path)
    if (path / "model" / MODEL_META).exists():
        final = saved_steps(path / "model")
        return [line for line, broken in zip(found.skipped, checkpoints(path), strict=False)
                if (checkpoint_step(broken) or 0) > final]
    return found.skipped


def saved_steps(folder: Path) -> int:
    """The steps a saved model had trained (its swarm-model.json; 0 when it does not say)."""
    steps = read_meta(folder).get("steps", 0)
    return steps if isinstance(steps, int) and not isinstance(steps, bool) else 0


def describe_saved(folder: Path) -> str:
    """Which saved model this is, in one phrase: its folder, steps and when it was saved (UTC)."""
    import datetime

    saved = datetime.datetime.fromtimestamp((folder / MODEL_META).stat().st_mtime, datetime.UTC)
    return f"{folder} (step {saved_steps(folder)}, saved {saved:%Y-%m-%d %H:%M:%S} UTC)"


def read_meta(folder: Path) -> dict:
    try:
        meta = json.loads((folder / MODEL_META).read_text())
    except (OSError, ValueError) as err:
        raise ModelLoadError(f"saved model {str(folder)!r}: {MODEL_META} cannot be read: {first_line(err)}") from None
    if not isinstance(meta, dict) or not isinstance(meta.get("base"), str) or not isinstance(meta.get("lora"), bool):
        raise ModelLoadError(f"saved model {str(folder)!r}: {MODEL_META} lacks 'base' or 'lora'")
    return meta


def save_model(loaded: LoadedModel, folder: Path, lr: float, trained: dict | None = None) -> None:
    """Weights (or only the LoRA adapter), tokenizer and swarm-model.json, into `folder` (which must not
    exist: checkpoints write into a fresh temporary folder). `trained`: what it was trained on (`trained_on`),
    recorded beside base, lora and lr."""
    folder.mkdir(parents=True)
    loaded.model.save_pretrained(folder)
    loaded.tokenizer.save_pretrained(folder)
    meta = {"base": loaded.base, "lora": loaded.lora, "lr": lr, **(trained or {})}
    (folder / MODEL_META).write_text(json.dumps(meta, indent=1))


DISPLAY_NAME = 64  # characters of a model's name in announcements (receivers refuse strings over 128)


def display_name(name: str) -> str:
    """A model name as other peers may see it: a zoo or hub name as it is, a local path by its last part only
    (a volunteer's directories are not the swarm's business), at most DISPLAY_NAME characters."""
    if name not in _zoo_names() and looks_like_path(name):
        name = Path(name).expanduser().resolve().name or name
    return name[:DISPLAY_NAME]


def _zoo_names() -> tuple[str, ...]:
    from .zoo import ZOO

    return (*ZOO, *PACKAGED)


def looks_like_path(name: str) -> bool:
    return name.startswith((".", "/", "~")) or name.count("/") != 1 or Path(name).expanduser().exists()


def load_tokenizer(where, **kwargs):
    """A folder's or hub repo's tokenizer as it was saved. A tokenizer saved from a `tokenizers` object (the
    zoo's, and what peers save of them) declares the generic class in its tokenizer_config.json: it is loaded
    as exactly that, because AutoTokenizer would follow the model's config.json to the model family's own
    tokenizer class (Qwen2's), whose byte-level pre-tokenizer drops the zoo's spaces and the BPE's merges.
    A GGUF file's tokenizer (gguf_file=...) starts its encodings with BOS exactly when the file says so. A
    tokenizer without a pad token pads with EOS, wherever it is loaded (a peer's own, or a sender's rebuilt from
    its card), so that both give the same fingerprint."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    config = Path(where) / "tokenizer_config.json"
    if kwargs.get("gguf_file"):
        tokenizer = gguf_tokenizer(Path(where) / kwargs["gguf_file"])
    elif config.is_file() and json.loads(config.read_text()).get("tokenizer_class") in GENERIC_TOKENIZERS:
        tokenizer = PreTrainedTokenizerFast.from_pretrained(where, **kwargs)
    else:
        tokenizer = AutoTokenizer.from_pretrained(where, **kwargs)
    if tokenizer.pad_token_id is None:  # batches need one; its id is part of the fingerprint other peers check
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def _from_pretrained(where, dtype: str, **kwargs):
    import torch
    from transformers import AutoModelForCausalLM

    torch_dtype = getattr(torch, dtype)
    tokenizer = load_tokenizer(where, **kwargs)
    model = AutoModelForCausalLM.from_pretrained(where, dtype=torch_dtype, **kwargs)
    return model, tokenizer


def _load_files(where, dtype: str, what: str, **kwargs):
    """from_pretrained with unreadable or corrupt files reported as one ModelLoadError line."""
    from safetensors import SafetensorError

    try:
        return _from_pretrained(where, dtype, **kwargs)
    except (OSError, ValueError, KeyError, RuntimeError, SafetensorError) as err:
        raise ModelLoadError(f"{what} could not be loaded: {first_line(err)}") from None


def check_model(name: str) -> None:
    """Fails at once, in one line, for a model name that cannot be loaded here (what a peer checks before it
    joins a swarm, rather than after): a zoo model whose files are missing or damaged, a path without a
    config.json, a hub name whose configuration is neither cached nor reachable; with the nearest zoo or packaged
    name when it is close to one. The weights are loaded later (a packaged model's absence is reported then)."""
    import difflib

    from .zoo import ZOO
    from .zoo_store import zoo_model_path

    if name in ZOO:
        zoo_model_path(name)
        return
    if name in PACKAGED:
        return
    near = difflib.get_close_matches(name, (*ZOO, *PACKAGED), n=1, cutoff=0.8)
    hint = f"; did you mean {near[0]!r}?" if near else ""
    if looks_like_path(name):
        if not (Path(name).expanduser() / "config.json").exists() and saved_model_folder(name) is None:
            raise ModelLoadError(f"model {name!r} is not a zoo name ({', '.join((*ZOO, *PACKAGED))}) "
                                 f"and not a directory with a config.json{hint}")
        return
    from transformers import AutoConfig

    from node.system.runtime import hub_offline_reason

    reason = hub_offline_reason()
    what = f"model {name!r} ({reason}; only a cached copy would do)" if reason else f"model {name!r} from the hub"
    try:
        AutoConfig.from_pretrained(name)
    except (OSError, ValueError, KeyError) as err:
        raise ModelLoadError(f"{what} could not be loaded: {first_line(err)}{hint}") from None


def load_base(name: str, dtype: str = "float32"):
    """(model, tokenizer, source) for a zoo name, a packaged real model ('smollm2-135m', 'gemma3-270m'), a local
    directory or a hub name."""
    from .zoo import ZOO
    from .zoo_store import zoo_model_path

    if name in ZOO:
        where = zoo_model_path(name)  # its files checked against the zoo's manifest
        model, tokenizer = _load_files(where, dtype, f"zoo model {name!r} ({where})")
        return model, tokenizer, "zoo"
    if name in PACKAGED:
        folder = float_copy(name)
        model, tokenizer = _load_files(folder, dtype, f"model {name!r} (its float copy {folder}: delete the folder "
                                       f"to convert the package's file again)")
        return model, tokenizer, "gguf"
    if looks_like_path(name):
        path = Path(name).expanduser()
        if not (path / "config.json").exists():
            raise ModelLoadError(f"model {name!r} is not a zoo name ({', '.join((*ZOO, *PACKAGED))}) "
                                 f"and not a directory with a config.json")
        model, tokenizer = _load_files(path, dtype, f"model directory {name!r}")
        return model, tokenizer, "local"
    from node.system.runtime import hub_offline_reason

    reason = hub_offline_reason()
    what = f"model {name!r} ({reason}; only a cached copy would do)" if reason else f"model {name!r} from the hub"
    model, tokenizer = _load_files(name, dtype, what)
    return model, tokenizer, "hub"


def resolve_device(device: str) -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ModelLoadError(f"model.device {device!r} asked for, but torch sees no CUDA device")
    return device


def wrap_lora(model, cfg: ModelConfig, seed: int):
    """A peft LoRA model over every linear layer except the output head; base weights are frozen."""
    import torch
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(seed)
    lora = LoraConfig(r=cfg.lora_rank, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                      target_modules="all-linear", task_type="CAUSAL_LM")
    return get_peft_model(model, lora)


def _placed(model, tokenizer, cfg: ModelConfig):
    model.to(resolve_device(cfg.device))
    if model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def load_saved(folder: Path, cfg: ModelConfig, seed: int) -> LoadedModel:
    """A model folder a peer saved: full weights, or its base (by name) under the saved LoRA adapter, which
    goes on training (a full model with --lora gets a new adapter)."""
    meta = read_meta(folder)
    lr = float(meta.get("lr") or 0.0)
    if not meta["lora"]:
        model, tokenizer = _load_files(folder, cfg.dtype, f"saved model {str(folder)!r}")
        model = _placed(model, tokenizer, cfg)
        use_lora = cfg.lora
        if use_lora:
            model, lr = wrap_lora(model, cfg, seed), 0.0  # a new adapter: its own learning rate
        return LoadedModel(model, tokenizer, "saved", use_lora, meta["base"], lr)
    from peft import PeftModel

    model, _, _ = load_base(meta["base"], cfg.dtype)
    try:
        tokenizer = load_tokenizer(folder)
        model = PeftModel.from_pretrained(_placed(model, tokenizer, cfg), folder, is_trainable=True)
    except (OSError, ValueError, KeyError, RuntimeError) as err:
        raise ModelLoadError(f"saved LoRA adapter {str(folder)!r} could not be loaded: {first_line(err)}") from None
    return LoadedModel(model, tokenizer, "saved", True, meta["base"], lr)


def load_model(cfg: ModelConfig, seed: int = 0) -> LoadedModel:
    from .zoo import ZOO

    folder = saved_model_folder(cfg.name)
    if folder is not None:
        return load_saved(folder, cfg, seed)
    if (Path(cfg.name).expanduser() / "model" / "config.json").exists():  # an earlier version's output: its
        cfg = dataclasses.replace(cfg, name=str(Path(cfg.name).expanduser() / "model"))  # config.json is settings
    use_lora = cfg.lora or (cfg.name in ZOO and ZOO[cfg.name].lora)
    model, tokenizer, source = load_base(cfg.name, cfg.dtype)
    model = _placed(model, tokenizer, cfg)
    if use_lora:
        model = wrap_lora(model, cfg, seed)
    base = str(Path(cfg.name).expanduser().resolve()) if source == "local" else cfg.name
    return LoadedModel(model, tokenizer, source, use_lora, base)


def source_of(base: str) -> str:
    """How a peer with another tokenizer rebuilds this model's tokenizer offline (the card's tokenizer_source):
    "zoo:<kind>" for zoo models, "gguf:<name>" for the packaged real models, "hub:<repo id>" for hub
    models (from the receiver's cache only), "" for anything else (a local directory)."""
    from .zoo import ZOO, weights_spec

    if base in ZOO:
        return f"zoo:{weights_spec(base).tokenizer}"
    if base in PACKAGED:
        return f"gguf:{base}"
    if not base or looks_like_path(base):
        return ""
    return f"hub:{base}"


def resolve_source(source: str, fingerprint: str):
    """Another peer's tokenizer from its card, built only from what this machine has (a zoo kind, the SmolLM2
    package if installed, or a hub tokenizer already in the local cache: never a download on a peer's word),
    and only if its fingerprint is the one the card claims; None otherwise."""
    tokenizer, built_fingerprint = _build_source(source)
    return tokenizer if tokenizer is not None and built_fingerprint == fingerprint else None


@functools.lru_cache(maxsize=16)
def _build_source(source: str) -> tuple[object, str]:
    """(tokenizer, its fingerprint), or (None, ""); built once per source and process, whatever fingerprints
    senders claim for it (a GGUF tokenizer takes seconds to read: a sender must not make us read it again)."""
    from .tokenizer import tokenizer_fingerprint

    tokenizer = _load_source(source)
    return (tokenizer, tokenizer_fingerprint(tokenizer)) if tokenizer is not None else (None, "")


def _load_source(source: str):
    from .tokenizer import KINDS, build_tokenizer

    kind, _, name = source.partition(":")
    try:
        if kind == "zoo" and name in KINDS:
            return build_tokenizer(name)
        if kind == "gguf" and name in PACKAGED:
            folder = copy_ready(name)
            if folder is not None:
                return load_tokenizer(folder)
            if name == SMOLLM2:  # its GGUF file's tokenizer (12 s), as its float copy holds it
                folder, gguf = smollm2_location()
                return load_tokenizer(folder, gguf_file=gguf)
            return None  # Gemma: only a float copy this machine made (converting takes minutes)
        if kind == "hub" and name:
            from huggingface_hub import snapshot_download

            # the repo's files in the local cache, as its own peer loads them; nothing is fetched
            return load_tokenizer(snapshot_download(name, local_files_only=True))
    except (OSError, ValueError, KeyError, RuntimeError, ModelLoadError):  # not cached, not installed, malformed
        return None
    return None


def encode_prompt(tokenizer, item) -> list[int]:
    """Prompt ids: a chat-templated question for instruction models, the compact prompt otherwise."""
    if getattr(tokenizer, "chat_template", None):
        ids = tokenizer.apply_chat_template([{"role": "user", "content": item.question}],
                                            add_generation_prompt=True, tokenize=True)
        return list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)
    return tokenizer(item.prompt).input_ids
