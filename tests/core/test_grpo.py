"""Advantages and policy loss: values, the direction of gradients, micro-batch exactness, PODS at m = n."""
import pytest
import torch

from pods.grpo import LOSS_AGGREGATIONS, group_advantages, kept_advantages, policy_loss
from pods.selection import select


def test_group_advantages_match_the_authors_formula():
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0], [0.5, 0.5, 0.5, 0.5]])
    adv = group_advantages(rewards)
    std = torch.tensor([1.0, 0.0, 0.0, 1.0]).std()  # unbiased, as torch's default
    assert torch.allclose(adv[0], (rewards[0] - 0.5) / (std + 1e-4))
    assert torch.equal(adv[1], torch.zeros(4))
    assert torch.allclose(group_advantages(rewards, scale=False)[0], rewards[0] - 0.5)


def test_kept_vs_all_normalisation():
    rewards = torch.tensor([[1.0, 0.0, 0.0, 0.0, 0.0, 0.0]])
    kept = torch.tensor([[0, 1]])
    over_kept = kept_advantages(rewards, kept, normalize_over="kept")
    over_all = kept_advantages(rewards, kept, normalize_over="all")
    assert torch.allclose(over_kept, group_advantages(torch.tensor([[1.0, 0.0]])))
    assert torch.allclose(over_all, group_advantages(rewards)[:, :2])
    assert not torch.allclose(over_kept, over_all)
    with pytest.raises(ValueError, match="normalize_over"):
        kept_advantages(rewards, kept, normalize_over="some")


def test_pods_with_m_equal_n_is_plain_grpo():
    rewards = torch.rand(5, 8, generator=torch.Generator().manual_seed(0))
    for rule in ("max_variance", "max_reward", "random", "identity"):
        kept = select(rewards, 8, rule, torch.Generator().manual_seed(1))
        assert torch.equal(kept, torch.arange(8).expand(5, 8))
        assert torch.allclose(kept_advantages(rewards, kept), group_advantages(rewards))


def test_kept_advantages_take_the_usual_rewards_and_refuse_bad_input_naming_the_users_shapes():
    import numpy as np

    r = np.array([[0, 1, 1, 0, 1, 0, 0, 0]])  # 0/1 rewards as integers: the README's snippet
    expected = kept_advantages(r.astype(np.float32), select(r, 4))
    assert np.allclose(kept_advantages(r, select(r, 4)), expected)
    assert np.allclose(kept_advantages(r.astype(bool), select(r, 4)), expected)
    assert kept_advantages(torch.tensor(r), torch.tensor(select(r, 4))).dtype == torch.get_default_dtype()
    with pytest.raises(ValueError, match=r"rewards of group 1 contain NaN or inf"):
        kept_advantages(np.array([[0.0, 1.0], [np.nan, 1.0]]), np.array([[0, 1], [0, 1]]))
    two = np.array([[0.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    with pytest.raises(ValueError, match=r"normalize_over='kept' needs m >= 2 .*got kept \(2, 1\)"):
        kept_advantages(two, np.array([[0], [1]]))
    assert kept_advantages(two, np.array([[0], [1]]), normalize_over="all").shape == (2, 1)
    with pytest.raises(ValueError, match=r"kept must hold integer indices into each group's n = 3 rollouts, got dtype"):
        kept_advantages(two, np.array([[0.0, 1.0], [0.0, 1.0]]))
    with pytest.raises(ValueError, match=r"kept indices of group 1 repeat a rollout: \[2, 2\]"):
        kept_advantages(two, np.array([[0, 1], [2, 2]]))
    with pytest.raises(ValueError, match=r"kept indices of group 0 must lie in \[0, 3\), got \[0, 3\]"):
        kept_advantages(two, np.array([[0, 3], [0, 1]]))
    with pytest.raises(ValueError,
                       match=r"kept must have shape \[groups, m\] = \[2, m\] .*rewards \(2, 3\)\), got \(1, 2\)"):
        kept_advantages(two, np.array([[0, 1]]))
    with pytest.raises(ValueError, match=r"rewards must have shape \[groups, n\] with n >= 2, got \(4,\)"):
        kept_advantages(np.zeros(4), np.array([[0, 1]]))


def toy_bandit(aggregation: str, steps: int = 60) -> torch.Tensor:
    """A 3-armed bandit policy trained with group-normalised advantages; arm 2 pays 1, others 0."""
    logits = torch.zeros(3, requires_grad=True)
    optimizer = torch.optim.SGD([logits], lr=0.5)
    generator = torch.Generator().manual_seed(0)
    for _ in range(steps):
        probs = torch.softmax(logits, 0)
        actions = torch.multinomial(probs.detach(), 8, replacement=True, generator=generator)
        rewards = (actions == 2).float()[None]
        adv = group_advantages(rewards)[0]
        logp = torch.log_softmax(logits, 0)[actions][:, None]  # one "token" per rollout
        loss, _ = policy_loss(logp, logp.detach(), adv, torch.ones_like(logp), loss_agg=aggregation)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return torch.softmax(logits, 0).detach()


@pytest.mark.parametrize("aggregation", sorted(LOSS_AGGREGATIONS))
def test_gradient_moves_probability_to_the_rewarded_arm(aggregation):
    assert toy_bandit(aggregation)[2] > 0.9


def test_loss_gradient_sign_and_kl():
    logp = torch.tensor([[-1.0, -1.0], [-1.0, -1.0]], requires_grad=True)
    adv = torch.tensor([1.0, -1.0])
    loss, _ = policy_loss(logp, logp.detach(), adv, torch.ones(2, 2))
    loss.backward()
    assert (logp.grad[0] < 0).all() and (logp.grad[1] > 0).all()  # descent raises the good rollout
    ref = torch.tensor([[-2.0, -2.0], [-2.0, -2.0]])
    with_kl, metrics = policy_loss(logp, logp.detach(), torch.zeros(2), torch.ones(2, 2), ref_logprobs=ref, beta=0.1)
    expected_kl = torch.exp(torch.tensor(-1.0)) - (-1.0) - 1
    assert metrics["kl"] == pytest.approx(expected_kl.item())
    assert with_kl.item() == pytest.approx(0.1 * expected_kl.item())


def test_clipping_stops_gradient_outside_the_trust_region():
    old = torch.zeros(1, 1)
    logp = torch.full((1, 1), 0.5, requires_grad=True)  # ratio e^0.5 > 1.2
    loss, metrics = policy_loss(logp, old, torch.tensor([1.0]), torch.ones(1, 1))
    loss.backward()
    assert logp.grad.item() == 0.0 and metrics["clip_frac"] == 1.0


@pytest.mark.parametrize("aggregation", sorted(LOSS_AGGREGATIONS))
def test_micro_batches_sum_to_the_full_batch(aggregation):
    g = torch.Generator().manual_seed(0)
    logp = torch.randn(6, 5, generator=g)
    mask = (torch.rand(6, 5, generator=g) > 0.3).float()
    mask[:, 0] = 1
    adv = torch.randn(6, generator=g)
    full, _ = policy_loss(logp, logp - 0.1, adv, mask, loss_agg=aggregation)
    totals = dict(total_sequences=6, total_tokens=int(mask.sum()), max_len=5)
    parts = [policy_loss(logp[i : i + 2], logp[i : i + 2] - 0.1, adv[i : i + 2], mask[i : i + 2],
                         loss_agg=aggregation, **totals)[0] for i in (0, 2, 4)]
    assert torch.allclose(sum(parts), full)


def test_bad_arguments():
    x = torch.zeros(1, 1)
    with pytest.raises(ValueError, match="unknown loss_agg"):
        policy_loss(x, x, torch.zeros(1), x, loss_agg="mean")
    with pytest.raises(ValueError, match="ref_logprobs"):
        policy_loss(x, x, torch.zeros(1), x, beta=0.1)
    with pytest.raises(ValueError, match="shape"):
        group_advantages(torch.zeros(3))
