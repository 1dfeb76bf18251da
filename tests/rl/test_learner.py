"""Learner: full fine-tuning moves every parameter; LoRA moves only the adapter."""
import copy

from node.config import LossConfig, ModelConfig, TrainConfig
from node.generation.rollouts import Completion, Group
from node.models.loading import wrap_lora
from node.rl.learner import Learner
from node.tasks import get_task


def groups_for(tok):
    item = get_task("arith-add").item("train", 0)
    prompt = tok(item.prompt).input_ids
    right = tok(item.answer).input_ids + [tok.eos_token_id]
    wrong = tok(str(int(item.answer) + 1)).input_ids + [tok.eos_token_id]
    comps = [Completion(right, [-1.0] * len(right), "stop", item.answer, 1.0),
             Completion(wrong, [-1.0] * len(wrong), "stop", "", 0.0)]
    return [Group(item, prompt, comps)]


def snapshot(model):
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def test_full_fine_tuning_changes_every_parameter(tiny, transfer_policy):
    model = copy.deepcopy(tiny[0])
    before = snapshot(model)
    learner = Learner(model, tiny[1].pad_token_id, TrainConfig(), LossConfig(), transfer_policy(), temperature=1.0,
                      lr=1e-2)
    metrics = learner.step(groups_for(tiny[1]))
    assert metrics.sequences == 2 and metrics.grad_norm > 0
    after = snapshot(model)
    unchanged = [n for n in before if before[n].equal(after[n])]
    assert unchanged == []


def test_lora_changes_only_the_adapter(tiny, transfer_policy):
    model = wrap_lora(copy.deepcopy(tiny[0]), ModelConfig(lora=True), seed=0)
    before = snapshot(model)
    learner = Learner(model, tiny[1].pad_token_id, TrainConfig(), LossConfig(), transfer_policy(), temperature=1.0,
                      lr=1e-2)
    learner.step(groups_for(tiny[1]))
    after = snapshot(model)
    changed = {n for n in before if not before[n].equal(after[n])}
    lora_names = {n for n in before if "lora_" in n}
    # lora_B starts at zero, so after one step both A (gets a gradient once B moves) or at least B moved
    assert changed and changed <= lora_names
    assert any("lora_B" in n for n in changed)
    frozen = [n for n, p in model.named_parameters() if not p.requires_grad]
    assert frozen and all(before[n].equal(after[n]) for n in frozen)
    assert learner.params and all("lora_" in n for n, p in model.named_parameters() if p.requires_grad)
