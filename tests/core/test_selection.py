"""Down-sampling rules against brute force, determinism, the binary-reward structure, bad input."""
from itertools import combinations

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from pods.selection import SELECTION_RULES, select


def brute_force_best_variance(rewards: np.ndarray, m: int) -> float:
    return max(np.var(rewards[list(s)]) for s in combinations(range(len(rewards)), m))


reward_values = st.one_of(
    st.sampled_from([0.0, 1.0]),  # binary
    st.floats(-5, 5, allow_nan=False, width=32),  # continuous
    st.sampled_from([0.0, 0.1, 0.125, 1.0, 1.2]),  # GSM8K-like: correctness + small format terms, ties
)


@st.composite
def groups(draw):
    n = draw(st.integers(2, 10))
    m = draw(st.integers(1, n))
    rows = draw(st.integers(1, 3))
    rewards = np.array(draw(st.lists(st.lists(reward_values, min_size=n, max_size=n), min_size=rows, max_size=rows)))
    return rewards, m


@settings(max_examples=400, deadline=None)
@given(groups())
def test_max_variance_equals_exhaustive_search(case):
    rewards, m = case
    kept = select(rewards, m, "max_variance")
    assert kept.shape == (len(rewards), m)
    for row, idx in zip(rewards, kept):
        assert len(set(idx.tolist())) == m
        assert np.var(row[idx]) == pytest.approx(brute_force_best_variance(row, m), rel=1e-9, abs=1e-12)


def test_max_variance_is_top_k_plus_bottom():
    rewards = np.array([[0.3, 0.9, 0.1, 0.5, 0.7, 0.2, 0.8, 0.4]])
    kept = select(rewards, 4, "max_variance")[0]
    values = sorted(rewards[0][kept].tolist())
    assert values == [0.1, 0.2, 0.8, 0.9]


@settings(max_examples=200, deadline=None)
@given(st.integers(4, 40), st.data())
def test_binary_rewards_keep_balanced_classes(n, data):
    m = data.draw(st.integers(2, n - 1))
    correct = data.draw(st.integers(0, n))
    rewards = np.zeros((1, n))
    rewards[0, data.draw(st.permutations(range(n)))[:correct]] = 1.0
    kept_correct = int(rewards[0, select(rewards, m, "max_variance")[0]].sum())
    wrong = n - correct
    if correct >= m // 2 and wrong >= m - m // 2:
        # Both classes suffice: a balanced subset; with odd m the extra one is a correct rollout.
        assert kept_correct == (m + 1) // 2 if correct >= (m + 1) // 2 else kept_correct == m // 2
    elif correct < m // 2:
        assert kept_correct == correct  # every correct one, filled with wrong ones
    else:
        assert kept_correct == m - wrong  # every wrong one, filled with correct ones


def test_deterministic_tie_breaking():
    rewards = torch.tensor([[1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0]] * 3)
    first = select(rewards, 4, "max_variance")
    for _ in range(5):
        assert torch.equal(select(rewards.clone(), 4, "max_variance"), first)
    # Ties resolve by original index: the top takes the lowest-index correct rollouts, the bottom
    # the highest-index wrong ones.
    assert first[0].tolist() == [0, 2, 5, 6]
    assert torch.equal(first[0], first[1])


def test_all_equal_group_is_valid_and_deterministic():
    kept = select(np.full((2, 6), 0.5), 3, "max_variance")
    assert kept.tolist() == [[0, 1, 2], [0, 1, 2]]


def test_max_reward_keeps_highest():
    rewards = np.array([[0.2, 0.9, 0.1, 0.7, 0.9]])
    assert select(rewards, 3, "max_reward")[0].tolist() == [1, 3, 4]


def test_random_is_seeded_and_uniform():
    rewards = torch.zeros(2000, 8)
    a = select(rewards, 2, "random", torch.Generator().manual_seed(3))
    b = select(rewards, 2, "random", torch.Generator().manual_seed(3))
    assert torch.equal(a, b)
    counts = torch.bincount(a.flatten(), minlength=8).float() / a.numel()
    assert torch.allclose(counts, torch.full((8,), 1 / 8), atol=0.02)
    assert all(len(set(row.tolist())) == 2 for row in a)


def test_identity_and_types():
    rewards = np.random.default_rng(0).random((3, 5))
    assert select(rewards, 5, "identity").tolist() == [list(range(5))] * 3
    assert isinstance(select(rewards, 2), np.ndarray)
    assert select(torch.tensor(rewards), 2).dtype == torch.long
    with pytest.raises(ValueError, match="m == n"):
        select(rewards, 4, "identity")


@pytest.mark.parametrize(
    "rewards, m, rule, message",
    [
        (np.zeros((2, 4)), 5, "max_variance", "m must satisfy"),
        (np.zeros((2, 4)), 0, "max_variance", "m must satisfy"),
        (np.zeros((2, 1)), 1, "max_variance", "n >= 2"),
        (np.zeros(4), 2, "max_variance", "shape"),
        (np.zeros((2, 2, 2)), 1, "max_variance", "shape"),
        (np.array([[0.0, 1.0], [np.nan, 1.0]]), 1, "max_variance", "group 1"),
        (np.array([[0.0, np.inf]]), 1, "max_reward", "group 0"),
        (np.zeros((2, 4)), 2, "entropy",
         "unknown selection rule .entropy.; choose from identity, max_abs_advantage, max_reward, max_variance, random"),
    ],
)
def test_bad_input_names_the_problem(rewards, m, rule, message):
    with pytest.raises(ValueError, match=message):
        select(rewards, m, rule)


def test_registry_lists_the_paper_rules():
    assert {"max_variance", "max_reward", "random", "identity", "max_abs_advantage"} <= set(SELECTION_RULES)


def brute_force_max_abs_advantage(row: np.ndarray, m: int) -> tuple:
    """Among all size-m subsets with the largest total distance from the group mean (within
    rounding), the lexicographically first: the rule's tie-break, stated without its sort."""
    distance = np.abs(row - row.mean())
    totals = {s: distance[list(s)].sum() for s in combinations(range(len(row)), m)}
    best = max(totals.values())
    # the test draws distances tied (< 1e-14 apart) or > 1e-9 apart: a subset worse than the best
    # swaps in at least one distance > 1e-9 smaller, a tied one differs by rounding only
    return min(s for s, t in totals.items() if t >= best - 1e-10)


@settings(max_examples=400, deadline=None)
@given(groups())
def test_max_abs_advantage_equals_exhaustive_search(case):
    rewards, m = case
    # distances are either tied or apart by far more than rounding (the rule's resolution is
    # 1e-12 of the largest; a gap near it may fall either way, in the rule as in any sort)
    for row in rewards:
        d = np.abs(row - row.mean())
        gaps = np.abs(d[:, None] - d[None, :])
        assume(((gaps < 1e-14) | (gaps > 1e-9)).all())
    kept = select(rewards, m, "max_abs_advantage")
    for row, idx in zip(rewards, kept):
        assert tuple(idx.tolist()) == brute_force_max_abs_advantage(row, m)


def test_max_abs_advantage_keeps_the_rarer_outcome_first():
    # 3 right of 8: the right ones lie 0.625 from the mean, the wrong ones 0.375
    rewards = np.array([[0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 0.0], [0.5] * 8])
    kept = select(rewards, 4, "max_abs_advantage")
    assert kept[0].tolist() == [0, 1, 4, 6]  # the three 1s, then the first 0
    assert kept[1].tolist() == [0, 1, 2, 3]  # all tie: the lowest indices
    # symmetric rewards whose distances differ only by rounding still tie by index
    assert select(np.array([[0.1, 0.7, 0.4]]), 2, "max_abs_advantage")[0].tolist() == [0, 1]


@pytest.mark.parametrize("rewards, m, message", [
    ([[0.0, 1.0, 1.0, 0.0]], 2.5, "m must be an integer (rollouts kept per group), got 2.5"),
    ([[0.0, 1.0, 1.0, 0.0]], True, "m must be an integer (rollouts kept per group), got True"),
    ([["a", "b", "c"]], 1,
     "rewards must be numbers (float, int or bool) of shape [groups, n], got list [['a', 'b', 'c']]"),
    (np.array([["1", "0"]]), 1, "rewards must be numbers (float, int or bool) of shape [groups, n], got ndarray"),
    ([[0.0, 1.0], [1.0]], 1, "rewards must be numbers (float, int or bool) of shape [groups, n], got list"),
])
def test_a_fractional_m_or_rewards_that_are_not_numbers_are_refused_in_one_line(rewards, m, message):
    with pytest.raises(ValueError) as refused:
        select(rewards, m)
    assert str(refused.value).startswith(message) and "\n" not in str(refused.value)


def test_kept_advantages_refuses_rewards_that_are_not_numbers():
    from pods.grpo import kept_advantages

    with pytest.raises(ValueError,
                       match=r"rewards must be numbers of shape \[groups, \.\.\.\], got list \[\['a', 'b'\]\]"):
        kept_advantages([["a", "b"]], [[0]])
