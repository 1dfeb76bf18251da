"""`swarm export OUT DIR`: a trained peer's model as a Hugging Face-ready folder.

The folder holds full weights (a LoRA adapter is merged into its base first), the tokenizer and a model card
(README.md, with the hub's metadata block) that says what the model is: its base, the task, the steps, the last
held-out accuracy and the swarm it trained with, all read from the run's swarm-model.json. `push_to_hub` uploads
the folder with huggingface_hub where the hub is reachable (a token from `huggingface-cli login` or HF_TOKEN).
"""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from node.config import ModelConfig
from node.errors import ConfigError, ModelLoadError

from .loading import MODEL_META, load_model, read_meta, saved_model_folder


def model_card(meta: dict, source: str) -> str:
    """The README.md of an exported model, from its swarm-model.json (`meta`) and the run it came from."""
    task = (meta.get("task") or {}).get("name", "unknown")
    accuracy = meta.get("accuracy") or {}
    swarm = meta.get("swarm") or ""
    base = meta.get("base", "")
    names = {"train": "held-out, in distribution", "test": "held-out, out of distribution"}
    rows = [f"| {names.get(k.split('/')[0], k.split('/')[0])} | {k.split('/')[1]} pass@1 | {v:.3f} |"
            for k, v in sorted(accuracy.items()) if k.count("/") == 1]
    front = ["---", "library_name: transformers", "tags:", "- swarm-node", "- reinforcement-learning", "- grpo"]
    if base and "/" in base and not Path(base).expanduser().exists():  # a hub name: the hub links the base
        front.append(f"base_model: {base}")
    front.append("---")
    transfer = meta.get("transfer") or "f-tis"  # (models saved before the policy was recorded trained with F-TIS)
    trained = (f"in the swarm `{swarm}` (each peer trains on its own groups and on groups other peers shared: "
               f"token ids and log-probabilities, taught by the transfer policy `{transfer}`)" if swarm
               else "alone (no swarm)")
    lines = [*front, "", f"# {Path(source).name or 'model'}, trained with swarm-node", "",
             f"Fine-tuned from `{base}`{' through a LoRA adapter (merged here)' if meta.get('lora') else ''} by "
             f"reinforcement learning (GRPO-style groups) on the task `{task}` for {meta.get('steps', 0)} steps, "
             f"{trained}.", ""]
    if rows:
        lines += ["## Held-out accuracy at the end of training", "", "| split | metric | value |", "|---|---|---|",
                  *rows, ""]
    lines += ["## Reproduce the evaluation", "", "```", f"swarm eval --model DIR --task {task}", "```", ""]
    return "\n".join(lines)


def export_model(source: str, target: Path, dtype: str = "float32") -> Path:
    """Writes `source`'s model (an output folder: the newest of its saved model and checkpoints; a checkpoint or
    a saved model folder) into `target` (which must not exist or be empty) as weights, tokenizer and README.md;
    returns the saved model folder it wrote (describe_saved says which)."""
    folder = saved_model_folder(source)
    if folder is None:
        raise ConfigError(f"export: {source!r} holds no model a peer saved (give a run's --out folder)")
    if target.exists() and any(target.iterdir()):
        raise ConfigError(f"export: {str(target)!r} is not empty")
    meta = read_meta(folder)
    loaded = load_model(ModelConfig(name=str(folder), dtype=dtype, device="cpu"))
    model = loaded.model.merge_and_unload() if loaded.lora else loaded.model
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".export-", dir=target.parent))
    try:
        model.save_pretrained(scratch)
        loaded.tokenizer.save_pretrained(scratch)
        (scratch / "README.md").write_text(model_card(meta, source))
        (scratch / MODEL_META).unlink(missing_ok=True)
        if target.exists():
            target.rmdir()
        scratch.rename(target)
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    return folder


def push_to_hub(folder: Path, repo: str) -> str:
    """Uploads an exported folder to the hub repository `repo` (created if missing); returns its URL."""
    from huggingface_hub import HfApi

    api = HfApi()
    try:
        api.create_repo(repo, exist_ok=True)
        api.upload_folder(repo_id=repo, folder_path=str(folder), commit_message="swarm-node export")
    except Exception as err:  # noqa: BLE001 (network, authentication: one line for the user)
        raise ModelLoadError(f"export: pushing to the hub repository {repo!r} failed: {err}") from None
    return f"https://huggingface.co/{repo}"
