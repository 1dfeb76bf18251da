"""Held-out evaluation: the fixed prompt set, exact pass@1 arithmetic, greedy decoding through the real backend,
and evaluation inside training (metrics file, summary, control API)."""
import dataclasses
import json
import shutil
import subprocess
import sys
from pathlib import Path

import torch

from node.app.runner import update_status
from node.config import EvalConfig, build_config
from node.evaluation import HELD_OUT_START, SplitScore, as_metrics, by_kind, evaluate, held_out_items, pass_at_1
from node.generation.rollouts import Completion
from node.metrics import StepResult
from node.models.loading import encode_prompt
from node.observability.report import accuracy_change
from node.peer import Peer
from node.swarm.control import NodeStatus
from node.tasks import get_task
from node.tasks.base import item_kind

ROOT = Path(__file__).resolve().parents[1]


def test_held_out_items_are_fixed_and_never_drawn_by_training():
    task = get_task("arith")
    a, b = held_out_items(task, "test", 64), held_out_items(task, "test", 64)
    assert a == b and len(a) == 64
    assert all(item.ref.index >= HELD_OUT_START and item.ref.split == "test" for item in a)
    assert len({item.prompt for item in a}) > 40  # varied prompts, not one repeated
    ops = {i.prompt[i.prompt.index("+") if "+" in i.prompt else i.prompt.index("-")] for i in a}
    assert ops == {"+", "-"}  # mixed arith holds both skills


def comp(text: str, finished: bool = True) -> Completion:
    return Completion([1], [-0.1], "stop" if finished else "length", text)


def test_pass_at_1_is_the_mean_verifier_score_over_all_completions():
    task = get_task("arith-add")
    items = held_out_items(task, "train", 3)
    right = [item.answer for item in items]
    groups = [[comp(right[0]), comp("x")],  # 1 of 2
              [comp(right[1]), comp(right[1])],  # 2 of 2
              [comp(right[2], finished=False), comp("0" if right[2] != "0" else "1")]]  # cut off: 0 of 2
    assert pass_at_1(task, items, groups) == 3 / 6
    assert pass_at_1(task, [], []) == 0.0


def test_greedy_accuracy_equals_plain_greedy_decoding(tiny):
    """evaluate()'s greedy figure, through the backend, equals greedy decoding done here with model.generate."""
    cfg = build_config({"model": {"name": "tiny-add"}, "eval": {"prompts": 24, "samples": 3, "splits": ("train",),
                                                                  "batch": 16}})
    peer = Peer(cfg)
    task = get_task("arith-add")
    scores, seconds = evaluate(peer.backend, peer.loaded.tokenizer, task, cfg.eval)
    assert [s.split for s in scores] == ["train"] and seconds > 0
    tok, model = peer.loaded.tokenizer, peer.loaded.model
    right = 0
    for item in held_out_items(task, "train", 24):
        ids = torch.tensor([encode_prompt(tok, item)])
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
                             max_new_tokens=peer.cfg.generation.max_new_tokens, pad_token_id=peer.backend.pad_id,
                             eos_token_id=sorted(peer.backend.eos_ids))[0, ids.shape[1]:].tolist()
        finished = any(t in peer.backend.eos_ids for t in out)
        if finished:
            out = out[: next(i for i, t in enumerate(out) if t in peer.backend.eos_ids) + 1]
        right += task.score(item, tok.decode(out, skip_special_tokens=True), finished)
    assert scores[0].greedy == right / 24
    again, _ = evaluate(peer.backend, tok, task, cfg.eval)
    assert again == scores  # the same prompts and sampling seed: the same figures
    assert 0 < scores[0].sampled < 1
    greedy_only, _ = evaluate(peer.backend, tok, task, dataclasses.replace(cfg.eval, samples=0))
    assert greedy_only[0].sampled is None and greedy_only[0].greedy == scores[0].greedy  # eval.samples 0: no sampling
    metrics = as_metrics(greedy_only)
    assert "train/sampled" not in metrics and metrics["train/greedy"] == scores[0].greedy


def test_a_split_the_task_lacks_is_skipped():
    class OneSplit:
        name, version, splits = "one", "1", ("train",)

    assert evaluate(None, None, OneSplit(), EvalConfig(splits=("test",)))[0] == []


def test_training_evaluates_every_k_steps_and_after_the_last(tiny):
    cfg = build_config({"model": {"name": "tiny-add"}, "train": {"steps": 5, "prompts_per_step": 4,
                                                                 "group_policy": "fixed"},
                        "eval": {"every": 2, "prompts": 16}})
    peer = Peer(cfg)
    assert all(item.ref.index < HELD_OUT_START for item in peer.next_items(500))  # training never draws them
    results = [peer.step(s) for s in range(5)]
    assert [bool(r.eval) for r in results] == [False, True, False, True, True]
    assert set(results[1].eval) == {"train/greedy", "train/sampled", "test/greedy", "test/sampled"}
    assert results[0].eval_before and not results[1].eval_before
    assert all(r.eval_seconds > 0 for r in results if r.eval)
    back = StepResult.from_dict(json.loads(results[3].to_json()))
    assert back.eval == results[3].eval
    status = NodeStatus()
    for r in results:
        update_status(status, r, [r.reward])
    assert status.accuracy == results[-1].eval and status.accuracy_step == 5


def test_accuracy_change_reads_like_a_sentence():
    start = {"train/greedy": 0.25, "test/greedy": 0.0}
    end = {"train/greedy": 0.5, "train/sampled": 0.4, "test/greedy": 0.0625}
    assert accuracy_change(start, end) == "ID (train) 0.250 -> 0.500, OOD (test) 0.000 -> 0.062 (greedy pass@1)"
    assert accuracy_change({}, {}) == "not evaluated"
    start["train/greedy.sum"], end["train/greedy.sum"], end["train/greedy.difference"] = 0.5, 0.75, 0.25
    assert accuracy_change(start, end) == ("ID (train) 0.250 -> 0.500 (sum 0.500 -> 0.750, difference 0.250), "
                                           "OOD (test) 0.000 -> 0.062 (greedy pass@1)")


def test_digits_accuracy_is_split_by_operator():
    task = get_task("digits")
    items = held_out_items(task, "train", 40)
    kinds = [item_kind(task, item) for item in items]
    assert set(kinds) == {"sum", "difference"}
    assert all((k == "difference") == ("-" in item.prompt) for k, item in zip(kinds, items, strict=True))
    scores = [1.0 if k == "sum" else 0.0 for k in kinds]  # right on every sum, wrong on every difference
    assert by_kind(task, items, scores) == (("difference", 0.0), ("sum", 1.0))
    metrics = as_metrics([SplitScore("train", 40, sum(scores) / 40, 0.5, by_kind(task, items, scores))])
    assert metrics["train/greedy.sum"] == 1.0 and metrics["train/greedy.difference"] == 0.0
    assert by_kind(get_task("arith-add"), held_out_items(get_task("arith-add"), "train", 4), [1.0] * 4) == ()


def test_swarm_eval_command(tiny):
    out = subprocess.run([sys.executable, str(ROOT / "swarm_cli.py"), "eval", "--model", "tiny-sub", "--task", "arith",
                          "--eval-prompts", "32", "--json"], capture_output=True, text=True, cwd=ROOT, timeout=300,
                         check=False)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert [s["split"] for s in report["splits"]] == ["train", "test"]
    assert all(s["prompts"] == 32 and 0 <= s["greedy"] <= 1 for s in report["splits"])
    assert all(s["cut"] < 0.5 for s in report["splits"]) and "completion cap" not in out.stderr
    short = subprocess.run([sys.executable, str(ROOT / "swarm_cli.py"), "eval", "--model", "tiny-sub", "--task",
                            "arith", "--eval-prompts", "8", "--json", "--set", "generation.max_new_tokens=1"],
                           capture_output=True, text=True, cwd=ROOT, timeout=300, check=False)
    assert short.returncode == 0, short.stderr  # no answer of arith fits in one token with its end: all are cut
    assert all(s["cut"] == 1.0 and s["greedy"] == 0.0 for s in json.loads(short.stdout)["splits"])
    assert "100% of the answers hit the completion cap of 1 tokens" in short.stderr
    greedy_only = subprocess.run([sys.executable, str(ROOT / "swarm_cli.py"), "eval", "--model", "tiny-sub", "--task",
                                  "arith", "--eval-prompts", "32", "--eval-samples", "0"],
                                 capture_output=True, text=True, cwd=ROOT, timeout=300, check=False)
    assert greedy_only.returncode == 0, greedy_only.stderr  # the table says sampled pass@1 was not measured
    assert "sampled pass@1 (off)" in greedy_only.stdout
    assert [line.split()[-2:] for line in greedy_only.stdout.splitlines()[2:]] == [
        [f"{s['greedy']:.3f}", "-"] for s in report["splits"]]
    bad = subprocess.run([sys.executable, str(ROOT / "swarm_cli.py"), "eval", "--eval-splits", "dev"],
                         capture_output=True, text=True, cwd=ROOT, timeout=120, check=False)
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0 and "eval.splits" in bad.stderr


def swarm_cli(*args, timeout=300):
    return subprocess.run([sys.executable, str(ROOT / "swarm_cli.py"), *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=timeout, check=False)


def test_swarm_eval_of_a_saved_model_defaults_to_its_task_and_names_a_skipped_checkpoint(tmp_path):
    out = tmp_path / "out"
    run = swarm_cli("run", "--model", "tiny-add", "--task", "arith", "--steps", "2", "--prompts", "4",
                    "--set", "eval.prompts=12", "--checkpoint-every", "1", "--checkpoint-minutes", "0",
                    "--out", str(out))
    assert run.returncode == 0, run.stderr
    meta = json.loads((out / "model" / "swarm-model.json").read_text())
    assert meta["task"] == {"name": "arith", "data_files": ""} and meta["eval"]["prompts"] == 12

    trained = swarm_cli("eval", "--model", str(out), "--json")  # the task it was trained on, not eval's default
    assert trained.returncode == 0, trained.stderr
    report = json.loads(trained.stdout)
    assert report["task"] == "arith" and all(s["prompts"] == 12 for s in report["splits"])
    assert f"swarm eval: evaluating {out / 'model'} (step 2, saved 20" in trained.stderr, trained.stderr
    chosen = swarm_cli("eval", "--model", str(out), "--task", "arith-add", "--eval-prompts", "8", "--eval-splits",
                       "train", "--json")
    assert json.loads(chosen.stdout)["task"] == "arith-add"  # what the user gives wins

    exported = swarm_cli("export", str(out), str(tmp_path / "export"))  # full weights, as transformers loads them
    assert exported.returncode == 0, exported.stderr
    assert exported.stdout.startswith(f"exported {out / 'model'} (step 2, saved 20"), exported.stdout
    from transformers import AutoModelForCausalLM

    from node.config import ModelConfig
    from node.models.loading import load_model

    plain, trained = AutoModelForCausalLM.from_pretrained(tmp_path / "export"), load_model(ModelConfig(name=str(out)))
    ids = torch.tensor([trained.tokenizer("12+7=").input_ids])
    with torch.no_grad():
        assert torch.equal(plain(ids).logits, trained.model(ids).logits)
    card = (tmp_path / "export" / "README.md").read_text()
    assert "on the task `arith` for 2 steps" in card and "LoRA" not in card

    # a model/ older than the newest checkpoint (a run resumed since, still running or stopped): the checkpoint
    final = json.loads((out / "model" / "swarm-model.json").read_text())
    (out / "model" / "swarm-model.json").write_text(json.dumps({**final, "steps": 1}))
    newer = swarm_cli("eval", "--model", str(out), "--eval-splits", "train", "--eval-prompts", "4", "--json")
    assert newer.returncode == 0, newer.stderr
    assert f"swarm eval: evaluating {out / 'checkpoints' / 'step-000000002' / 'model'} (step 2, " in newer.stderr
    stale = swarm_cli("export", str(out), str(tmp_path / "export-newest"))
    assert stale.stdout.startswith(f"exported {out / 'checkpoints' / 'step-000000002' / 'model'} (step 2,")

    # a run that never finished, whose newest checkpoint lost bytes: the older one is evaluated, and said so

    shutil.rmtree(out / "model")
    newest = out / "checkpoints" / "step-000000002"
    weights = newest / "model" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    older = swarm_cli("eval", "--model", str(out), "--eval-splits", "train", "--json")
    assert older.returncode == 0, older.stderr
    lines = older.stderr.strip().splitlines()
    assert lines[0] == (
        f"swarm eval: checkpoint {newest} skipped: model/model.safetensors has 1000 bytes, the manifest says "
        f"{(out / 'checkpoints' / 'step-000000001' / 'model' / 'model.safetensors').stat().st_size}")
    assert len(lines) == 2 and lines[1].startswith(
        f"swarm eval: evaluating {out / 'checkpoints' / 'step-000000001' / 'model'} (step 1, saved 20"), lines
    assert json.loads(older.stdout)["task"] == "arith"


def test_swarm_eval_refuses_lora_and_absurd_numbers():
    lora = swarm_cli("eval", "--lora", timeout=120)
    assert lora.returncode == 2 and "--lora" in lora.stderr
    huge = swarm_cli("eval", "--eval-prompts", "99999999999999999999999", timeout=120)
    assert huge.returncode == 2 and huge.stderr.strip().count("\n") == 0
    assert "eval.prompts must be at most 2147483647" in huge.stderr


def test_cut_share_counts_the_completions_that_hit_the_cap():
    from node.evaluation import cut_share
    from node.generation.rollouts import Completion

    def c(reason):
        return Completion([1], [0.0], reason, "")

    assert cut_share([[c("stop"), c("length")], [c("length"), c("length")]]) == 0.75
    assert cut_share([]) == 0.0
