"""The compact wire form (float16 behaviour log-probs) does not change training: the F-TIS gradient from
compact log-probs equals the one from exact log-probs within a tolerance scaled to the gradient's norm."""
import copy

import torch

from node.config import GenerationConfig, LossConfig, TransferConfig, TrustConfig
from node.generation.rollouts import Completion, Group, Received
from node.generation.transformers_backend import TransformersBackend
from node.rl.batching import build_batch
from node.rl.learner import objective, sequence_logprobs
from node.rl.transfer.plan import plan_loss
from node.rl.transfer.registry import build_policy
from protocol.codec import pack_logprobs, unpack_logprobs


def gradient(model, received, pad_id) -> tuple[torch.Tensor, dict]:
    """The flattened gradient of the F-TIS loss on received groups (no optimiser step), and the loss metrics."""
    model = copy.deepcopy(model)
    policy = build_policy(TransferConfig("f-tis"), checks_work=False)
    batch = build_batch([], received, pad_id, lambda rewards, r: policy.advantages(rewards, r, 1e-4), False)
    logp = sequence_logprobs(model, batch, temperature=1.0)
    plan = plan_loss(batch, logp, policy, TrustConfig(), None, [], 20.0)
    objective(plan, logp, logp.detach(), LossConfig()).backward()
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]), plan.metrics


def test_gradient_from_exact_and_compact_logprobs_agree(tiny, sampled_groups):
    model, tok = tiny
    # generated at temperature 0.7 and trained at 1.0: received-like, off-policy; and in half the completions
    # the first token claims 1 nat less than it had (as a sender with another model might), so that, whatever
    # the weights sampled, some weights are truncated at C = 2 (e > 2), well within the plausibility bound
    backend = TransformersBackend(model, tok, GenerationConfig(temperature=0.7, max_new_tokens=8))
    exact = sampled_groups(backend, tok, "arith", 8, 8)
    for group in exact:
        for c in group.completions[::2]:
            c.logprobs = [c.logprobs[0] - 1.0, *c.logprobs[1:]]
    compact = [Group(g.item, g.prompt_ids, [
        Completion(c.token_ids, unpack_logprobs(pack_logprobs(c.logprobs)).tolist(), c.finish_reason, c.text,
                   c.reward) for c in g.completions]) for g in exact]
    exact, compact = [Received(g, b"s") for g in exact], [Received(g, b"s") for g in compact]
    assert any(a.logprobs != b.logprobs for ga, gb in zip(exact, compact, strict=True)
               for a, b in zip(ga.group.completions, gb.group.completions, strict=True))  # the rounding is real
    g_exact, m_exact = gradient(model, exact, tok.pad_token_id)
    g_compact, m_compact = gradient(model, compact, tok.pad_token_id)
    assert g_exact.norm() > 0 and m_exact.truncated_frac > 0  # w matters
    # float16 keeps 11 bits: each log-prob moves by at most |lp| * 2^-11, each weight by that factor
    assert (g_exact - g_compact).norm() <= 1e-2 * g_exact.norm()
    assert abs(m_exact.mean_weight - m_compact.mean_weight) <= 1e-3
    assert m_exact.implausible == m_compact.implausible == 0
