"""The compact wire form (float16 behaviour log-probs) does not change training."""
import copy

import torch

from node.config import GenerationConfig, LossConfig, TrainConfig
from node.generation import TransformersBackend
from node.learner import Learner
from node.peer import score_groups
from node.rollouts import Completion, Group
from node.tasks import get_task
from protocol.codec import pack_logprobs, unpack_logprobs


def test_loss_and_update_from_exact_and_compact_logprobs_agree(tiny):
    model, tok = tiny
    task = get_task("arith")
    items = [task.item("train", i) for i in range(8)]
    prompts = [tok(it.prompt).input_ids for it in items]
    # generated at temperature 0.7 and trained at 1.0: received-like, off-policy, so the weights matter
    outputs, _ = TransformersBackend(model, tok, GenerationConfig(temperature=0.7)).generate(prompts, 8, seed=0)
    exact = [Group(it, p, c, own=False) for it, p, c in zip(items, prompts, outputs)]
    score_groups(task, exact)
    compact = [Group(g.item, g.prompt_ids, [
        Completion(c.token_ids, unpack_logprobs(pack_logprobs(c.logprobs)).tolist(), c.finish_reason, c.text,
                   c.reward) for c in g.completions], own=False) for g in exact]
    assert any(a.logprobs != b.logprobs for ga, gb in zip(exact, compact)
               for a, b in zip(ga.completions, gb.completions))  # the rounding is real
    results = []
    for groups in (exact, compact):
        m = copy.deepcopy(model)
        before = [p.detach().clone() for p in m.parameters()]
        metrics = Learner(m, tok.pad_token_id, TrainConfig(), LossConfig(variant="f-tis"), 1.0, lr=1e-3).step(groups)
        delta = torch.cat([(p.detach() - b).flatten() for p, b in zip(m.parameters(), before)])
        results.append((metrics, delta))
    (m_exact, d_exact), (m_compact, d_compact) = results
    assert abs(m_exact["loss"] - m_compact["loss"]) <= 1e-3 * max(abs(m_exact["loss"]), 1e-3)
    assert abs(m_exact["mean_weight"] - m_compact["mean_weight"]) <= 1e-3
    cosine = torch.nn.functional.cosine_similarity(d_exact, d_compact, dim=0)
    assert cosine > 0.999 and (d_exact - d_compact).norm() <= 0.02 * d_exact.norm()
