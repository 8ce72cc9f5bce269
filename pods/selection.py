"""Down-sampling rules: which m of the n rollouts of each prompt go into the policy update.

Every rule is a pure function `(rewards[G, n] float64 tensor, m, generator) -> indices[G, m]`,
registered by name in `SELECTION_RULES` (the pattern of verl's `core_algos.py`). `select` is the
public entry point: it validates input once, accepts numpy or torch, and returns the same kind.

Ties are broken by original index, never by sort instability, so the same rewards always give the
same indices. Returned indices are sorted ascending within each group, which keeps the kept
rollouts in generation order.
"""
from __future__ import annotations

import numbers
from typing import Callable

import numpy as np
import torch

from pods.registry import Registry

SelectionRule = Callable[[torch.Tensor, int, "torch.Generator | None"], torch.Tensor]
SELECTION_RULES: Registry[SelectionRule] = Registry("selection rule")
register_rule = SELECTION_RULES.register


def _keep_top_and_bottom(values: torch.Tensor, ascending: torch.Tensor, k: torch.Tensor, m: int) -> torch.Tensor:
    """Indices `[G, m]` of the k[g] highest plus the m - k[g] lowest values of each row.

    `ascending` is `values` sorted per row. Membership comes from thresholds (the k-th highest and
    the (m-k)-th lowest value), so no argsort is needed; among equal values the top takes the
    lowest indices and the bottom the highest, as a stable sort would, so the result is
    deterministic.
    """
    G, n = values.shape
    rows = torch.arange(G)
    inf = torch.tensor(float("inf"), dtype=values.dtype)
    top_threshold = torch.where(k > 0, ascending[rows, (n - k).clamp(max=n - 1)], inf)[:, None]
    bottom_threshold = torch.where(k < m, ascending[rows, (m - k - 1).clamp(min=0)], -inf)[:, None]

    above, at_top = values > top_threshold, values == top_threshold
    top_ties = at_top & (at_top.cumsum(1) <= (k[:, None] - above.sum(1, keepdim=True)))
    below, at_bottom = values < bottom_threshold, values == bottom_threshold
    from_the_end = at_bottom.flip(1).cumsum(1).flip(1)
    bottom_ties = at_bottom & (from_the_end <= (m - k[:, None] - below.sum(1, keepdim=True)))

    keep = above | top_ties | below | bottom_ties
    return keep.nonzero()[:, 1].view(G, m)  # row-major: ascending indices per group


def _sorted_values(rewards: torch.Tensor) -> torch.Tensor:
    # numpy's SIMD sort of values is several times faster than torch.sort on CPU, and values are
    # all the prefix sums need: membership is recovered by thresholds, not by a permutation.
    return torch.from_numpy(np.sort(rewards.numpy(), axis=1))


@register_rule("max_variance")
def max_variance(rewards: torch.Tensor, m: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """The size-m subset with the largest reward variance.

    Some variance-maximising subset is always the k highest rewards plus the m - k lowest, for some
    k in 0..m (convexity of the variance in any single element; docs/paper.md section 1.3). So: sort once,
    take prefix sums of r and r^2 from the top and from the bottom, and score all m + 1 splits at
    once: O(n log n + m) per group, vectorised over groups, no loop over groups or splits.
    """
    # Variance is shift-invariant; centring keeps the difference of sums below well conditioned
    # for rewards far from zero.
    centred = rewards - rewards.mean(dim=1, keepdim=True)
    ascending = _sorted_values(centred)
    zero = torch.zeros(len(centred), 1, dtype=centred.dtype)

    def prefix(x: torch.Tensor) -> torch.Tensor:  # [G, j] -> sums of the first 0..j entries
        return torch.cat([zero, x.cumsum(1)], 1)

    highest, lowest = ascending[:, -m:].flip(1), ascending[:, :m]  # only m from each end can be kept
    top_sum, top_sq = prefix(highest), prefix(highest**2)
    bottom_sum, bottom_sq = prefix(lowest), prefix(lowest**2)
    k = torch.arange(m, -1, -1)  # candidate splits: top-k plus bottom-(m-k), from k = m down to 0
    total = top_sum[:, k] + bottom_sum[:, m - k]
    spread = top_sq[:, k] + bottom_sq[:, m - k] - total * total / m  # m * variance
    # Splits whose variances differ only by rounding are ties (e.g. binary rewards, odd m); the
    # first of them, the one keeping the most top rollouts, wins, whatever the rounding did.
    # far above float64 rounding of these sums, far below any real gap between two splits
    rounding = 1e-12 * (top_sq[:, -1:] + bottom_sq[:, -1:])
    near_best = spread >= spread.max(dim=1, keepdim=True).values - rounding
    best_k = k[near_best.int().argmax(dim=1)]
    return _keep_top_and_bottom(centred, ascending, best_k, m)


@register_rule("max_reward")
def max_reward(rewards: torch.Tensor, m: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """The m highest rewards (the paper's ablation; it collapses, docs/paper.md section 3.3)."""
    return _keep_top_and_bottom(rewards, _sorted_values(rewards), torch.full((len(rewards),), m), m)


@register_rule("max_abs_advantage")
def max_abs_advantage(rewards: torch.Tensor, m: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """The m rollouts whose rewards lie farthest from their group's mean over all n: the largest
    |advantage| before normalisation (the selector an independent re-implementation of PODS found
    best at 0.5B). Distances that differ only by rounding tie, and ties go to the lower index."""
    distance = (rewards - rewards.mean(dim=1, keepdim=True)).abs()
    # far above float64 rounding of the mean, far below any real gap between two rewards
    resolution = 1e-12 * (distance.amax(dim=1, keepdim=True) + 1.0)
    # rank levels, farthest first: a new level starts wherever the next distance down is more than
    # `resolution` smaller (bucketing by value instead would split two rounding-equal distances that
    # straddle a bucket edge)
    ranked, position = torch.sort(distance, dim=1, descending=True, stable=True)
    steps = torch.cat([torch.zeros_like(ranked[:, :1], dtype=torch.long),
                       (ranked[:, :-1] - ranked[:, 1:] > resolution[:, :1]).long()], dim=1)
    level = torch.empty_like(steps).scatter_(1, position, steps.cumsum(dim=1))
    order = torch.sort(level, dim=1, stable=True).indices  # stable: ties keep index order
    return order[:, :m].sort(dim=1).values


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
    SELECTION_RULES[rule]  # an unknown name: ValueError listing the rules
    if isinstance(m, bool) or not isinstance(m, numbers.Integral):
        raise ValueError(f"m must be an integer (rollouts kept per group), got {m!r}")
    as_numpy = isinstance(rewards, np.ndarray)
    try:
        r = torch.as_tensor(rewards).detach().to(device="cpu", dtype=torch.float64)
    except (TypeError, ValueError, RuntimeError):
        raise ValueError(f"rewards must be numbers (float, int or bool) of shape [groups, n], got "
                         f"{type(rewards).__name__} {str(np.asarray(rewards, dtype=object).tolist())[:80]}") from None
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
