"""Down-sampling rules: which m of the n rollouts of each prompt go into the policy update.

Every rule is a pure function `(rewards[G, n] float64 tensor, m, generator) -> indices[G, m]`,
registered by name in `SELECTION_RULES` (the pattern of verl's `core_algos.py`). `select` is the
public entry point: it validates input once, accepts numpy or torch, and returns the same kind.

Ties are broken by original index, never by sort instability, so the same rewards always give the
same indices. Returned indices are sorted ascending within each group, which keeps the kept
rollouts in generation order.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import torch

SelectionRule = Callable[[torch.Tensor, int, "torch.Generator | None"], torch.Tensor]
SELECTION_RULES: dict[str, SelectionRule] = {}


def register_rule(name: str) -> Callable[[SelectionRule], SelectionRule]:
    def decorator(fn: SelectionRule) -> SelectionRule:
        SELECTION_RULES[name] = fn
        return fn

    return decorator


def _descending_order(rewards: torch.Tensor) -> torch.Tensor:
    """Indices sorting each group by reward, highest first, ties by lower original index first."""
    # A stable sort of the negated rewards keeps equal rewards in index order.
    return torch.sort(-rewards, dim=-1, stable=True).indices


@register_rule("max_variance")
def max_variance(rewards: torch.Tensor, m: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """The size-m subset with the largest reward variance.

    Some variance-maximising subset is always the k highest rewards plus the m - k lowest, for some
    k in 0..m (convexity of the variance in any single element; PAPER.md section 1.3). So: sort once,
    take prefix sums of r and r^2 over the descending order (top-k) and the ascending order
    (bottom-(m-k)), and score all m + 1 splits at once: O(n log n + m) per group, vectorised over
    groups. Among equally good splits the one keeping the most top rollouts wins.
    """
    G, n = rewards.shape
    order = _descending_order(rewards)
    # Variance is shift-invariant; centring keeps the difference of sums below well conditioned
    # for rewards far from zero.
    centred = rewards - rewards.mean(dim=1, keepdim=True)
    r = torch.gather(centred, 1, order)  # descending
    zero = torch.zeros(G, 1, dtype=r.dtype)
    top_sum = torch.cat([zero, r.cumsum(1)], 1)  # [G, n+1]: sum of the top j
    top_sq = torch.cat([zero, (r * r).cumsum(1)], 1)
    bottom_sum = torch.cat([zero, r.flip(1).cumsum(1)], 1)  # sum of the bottom j
    bottom_sq = torch.cat([zero, (r * r).flip(1).cumsum(1)], 1)

    k = torch.arange(m, -1, -1)  # top-k candidates, from k = m down to 0
    total = top_sum[:, k] + bottom_sum[:, m - k]
    total_sq = top_sq[:, k] + bottom_sq[:, m - k]
    spread = total_sq - total * total / m  # m * variance ranks subsets of one size
    # Splits whose variances differ only by rounding are ties (e.g. binary rewards, odd m); the
    # first of them, the one keeping the most top rollouts, wins, whatever the rounding did.
    best_spread = spread.max(dim=1, keepdim=True).values
    near_best = spread >= best_spread - 1e-9 * (best_spread.abs() + 1.0)
    best = k[near_best.int().argmax(dim=1)]

    positions = torch.arange(m).expand(G, m)
    top = positions < best[:, None]
    # Position i < k takes the i-th highest; the rest take the lowest, counted from the end.
    sorted_pos = torch.where(top, positions, n - m + positions)
    return torch.gather(order, 1, sorted_pos).sort(dim=1).values


@register_rule("max_reward")
def max_reward(rewards: torch.Tensor, m: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """The m highest rewards (the paper's ablation; it collapses, PAPER.md section 3.3)."""
    return _descending_order(rewards)[:, :m].sort(dim=1).values


@register_rule("random")
def random(rewards: torch.Tensor, m: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """m rollouts uniformly without replacement, independently per group, seeded by `generator`."""
    keys = torch.rand(rewards.shape, generator=generator, dtype=torch.float64)
    return keys.argsort(dim=1)[:, :m].sort(dim=1).values


@register_rule("identity")
def identity(rewards: torch.Tensor, m: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """Keep every rollout: vanilla GRPO (m == n)."""
    G, n = rewards.shape
    if m != n:
        raise ValueError(f"rule 'identity' keeps all rollouts, so it needs m == n (got m={m}, n={n})")
    return torch.arange(n).expand(G, n).clone()


def select(rewards, m: int, rule: str = "max_variance", generator: torch.Generator | None = None):
    """Indices `[G, m]` of the rollouts to keep, per group, under the named rule.

    `rewards` is `[G, n]` (numpy array or torch tensor, any real dtype); the result has the same
    kind (numpy int64 or torch long). Raises ValueError naming the problem for bad input.
    """
    if rule not in SELECTION_RULES:
        raise ValueError(f"unknown selection rule {rule!r}; known rules: {', '.join(sorted(SELECTION_RULES))}")
    as_numpy = isinstance(rewards, np.ndarray)
    r = torch.as_tensor(rewards).detach().to(device="cpu", dtype=torch.float64)
    if r.dim() != 2:
        raise ValueError(f"rewards must have shape [groups, n], got {r.dim()} dimension(s): {tuple(r.shape)}")
    G, n = r.shape
    if n < 2:
        raise ValueError(f"each group needs n >= 2 rollouts to select from, got n={n}")
    if not 1 <= m <= n:
        raise ValueError(f"m must satisfy 1 <= m <= n, got m={m}, n={n}")
    bad = (~torch.isfinite(r)).any(dim=1).nonzero().flatten()
    if len(bad):
        raise ValueError(f"rewards of group {bad[0].item()} contain NaN or inf: {r[bad[0]].tolist()}")
    indices = SELECTION_RULES[rule](r, m, generator)
    return indices.numpy() if as_numpy else indices.to(torch.as_tensor(rewards).device)
