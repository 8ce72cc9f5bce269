"""GRPO advantages and policy loss as pure tensor functions.

PODS changes only which rollouts reach these functions (`pods.selection`); the authors normalise
advantages over the kept subset (docs/paper.md section 1.1), which is the default here, with
normalisation over all n as an option.

Loss aggregations are a registry (`LOSS_AGGREGATIONS`), each written as "sum of token losses over
a denominator" so that a step split into micro-batches gives exactly the gradient of the whole
batch: the caller passes the whole step's totals (`total_sequences`, `total_tokens`).
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from pods.registry import Registry

ADVANTAGE_EPS = 1e-4  # the authors' (and TRL's) epsilon in (r - mean) / (std + eps)


def group_advantages(rewards: torch.Tensor, *, scale: bool = True, eps: float = ADVANTAGE_EPS) -> torch.Tensor:
    """`(r - mean) / (std + eps)` within each group (row) of `rewards[G, k]`.

    `std` is the unbiased (Bessel) standard deviation, as torch's default that the authors use.
    `scale=False` only centres the rewards (Dr. GRPO). A group of equal rewards gets advantage 0.
    """
    if rewards.dim() != 2 or rewards.shape[1] < 2:
        raise ValueError(f"rewards must have shape [groups, k] with k >= 2, got {tuple(rewards.shape)}")
    centred = rewards - rewards.mean(dim=1, keepdim=True)
    if not scale:
        return centred
    return centred / (rewards.std(dim=1, keepdim=True) + eps)


def kept_advantages(
    rewards: torch.Tensor,
    kept: torch.Tensor,
    *,
    normalize_over: str = "kept",
    scale: bool = True,
    eps: float = ADVANTAGE_EPS,
) -> torch.Tensor:
    """Advantages `[G, m]` of the kept rollouts `kept[G, m]` (indices into `rewards[G, n]`).

    `normalize_over="kept"` uses the mean and std of the m kept rewards (the authors' code);
    `"all"` uses all n generated rewards and then keeps the selected entries. Takes torch tensors
    or numpy arrays (as `pods.selection.select` returns them) and answers in the same kind.
    """
    if normalize_over not in ("kept", "all"):
        raise ValueError(f"normalize_over must be 'kept' or 'all', got {normalize_over!r}")
    as_numpy = isinstance(rewards, np.ndarray)
    rewards, kept = _checked(_numbers(rewards, "rewards"), _numbers(kept, "kept"), normalize_over)
    if normalize_over == "kept":
        advantages = group_advantages(torch.gather(rewards, 1, kept), scale=scale, eps=eps)
    else:
        advantages = torch.gather(group_advantages(rewards, scale=scale, eps=eps), 1, kept)
    return advantages.numpy() if as_numpy else advantages


def _numbers(values, what: str) -> torch.Tensor:
    """`values` as a tensor, or a ValueError that says numbers were expected (torch's own error for
    strings or ragged lists is a TypeError about its constructor)."""
    try:
        return torch.as_tensor(values)
    except (TypeError, ValueError, RuntimeError):
        shown = str(np.asarray(values, dtype=object).tolist())[:80]
        raise ValueError(f"{what} must be numbers of shape [groups, ...], got {type(values).__name__} "
                         f"{shown}") from None


def _checked(rewards: torch.Tensor, kept: torch.Tensor, normalize_over: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The user's `rewards[G, n]` as floats (0/1 and bool rewards are the usual ones) and `kept[G, m]`
    as long indices, or a ValueError that names the user's shapes, as `pods.selection.select` does."""
    if rewards.is_complex():
        raise ValueError(f"rewards must be real numbers, got dtype {rewards.dtype}")
    if not rewards.is_floating_point():
        rewards = rewards.to(torch.get_default_dtype())
    if rewards.dim() != 2 or rewards.shape[1] < 2:
        raise ValueError(f"rewards must have shape [groups, n] with n >= 2, got {tuple(rewards.shape)}")
    bad = (~torch.isfinite(rewards)).any(dim=1).nonzero().flatten()
    if len(bad):
        raise ValueError(f"rewards of group {bad[0].item()} contain NaN or inf: {rewards[bad[0]].tolist()}")
    G, n = rewards.shape
    if kept.dtype == torch.bool or kept.is_floating_point() or kept.is_complex():
        raise ValueError(f"kept must hold integer indices into each group's n = {n} rollouts, got dtype {kept.dtype}")
    if kept.dim() != 2 or kept.shape[0] != G or not 1 <= kept.shape[1] <= n:
        raise ValueError(f"kept must have shape [groups, m] = [{G}, m] with 1 <= m <= {n} (rewards "
                         f"{tuple(rewards.shape)}), "
                         f"got {tuple(kept.shape)}")
    if normalize_over == "kept" and kept.shape[1] < 2:
        raise ValueError(f"normalize_over='kept' needs m >= 2 kept rollouts per group (the std of one reward is "
                         f"undefined), got kept {tuple(kept.shape)}; keep more or use normalize_over='all'")
    kept = kept.to(torch.long)
    out = ((kept < 0) | (kept >= n)).any(dim=1).nonzero().flatten()
    if len(out):
        raise ValueError(f"kept indices of group {out[0].item()} must lie in [0, {n}), got {kept[out[0]].tolist()}")
    sorted_kept = kept.sort(dim=1).values
    dup = (sorted_kept[:, 1:] == sorted_kept[:, :-1]).any(dim=1).nonzero().flatten()
    if len(dup):
        raise ValueError(f"kept indices of group {dup[0].item()} repeat a rollout: {kept[dup[0]].tolist()}")
    return rewards, kept


# --- loss aggregation ----------------------------------------------------------------------------
Aggregation = Callable[..., torch.Tensor]
LOSS_AGGREGATIONS: Registry[Aggregation] = Registry("loss aggregation")
register_aggregation = LOSS_AGGREGATIONS.register


@register_aggregation("grpo")
def aggregate_grpo(token_loss, mask, *, total_sequences, total_tokens, max_len):
    """Mean over each sequence's tokens, then mean over sequences (the original GRPO, the authors')."""
    per_sequence = (token_loss * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1)
    return per_sequence.sum() / total_sequences


@register_aggregation("bnpo")
def aggregate_bnpo(token_loss, mask, *, total_sequences, total_tokens, max_len):
    """Sum over every token of the batch divided by the batch's token count."""
    return (token_loss * mask).sum() / max(total_tokens, 1)


@register_aggregation("dr_grpo")
def aggregate_dr_grpo(token_loss, mask, *, total_sequences, total_tokens, max_len):
    """Sum over tokens divided by a constant (sequences x max completion length): no length bias."""
    return (token_loss * mask).sum() / (total_sequences * max_len)


def policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    ref_logprobs: torch.Tensor | None = None,
    beta: float = 0.0,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    loss_agg: str = "grpo",
    total_sequences: int | None = None,
    total_tokens: int | None = None,
    max_len: int | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Clipped policy-gradient loss with an optional k3 KL penalty, aggregated by `loss_agg`.

    Shapes: `logprobs`, `old_logprobs`, `ref_logprobs`, `mask` are `[B, T]` per completion token;
    `advantages` is `[B]`. With one gradient step per generated batch the ratio is 1 and the loss
    is the plain group-normalised policy gradient (docs/paper.md section 1.2); the clip matters only for
    several steps on one batch. `total_*` default to this batch's own counts; pass the whole step's
    counts when this is one micro-batch of several.
    """
    if loss_agg not in LOSS_AGGREGATIONS:
        raise ValueError(f"unknown loss_agg {loss_agg!r}; known: {', '.join(sorted(LOSS_AGGREGATIONS))}")
    if beta > 0 and ref_logprobs is None:
        raise ValueError("beta > 0 needs ref_logprobs")
    mask = mask.to(logprobs.dtype)
    ratio = torch.exp(logprobs - old_logprobs)
    adv = advantages[:, None].to(logprobs.dtype)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high) * adv
    token_loss = -torch.min(unclipped, clipped)
    metrics: dict[str, float] = {}
    if beta > 0:
        delta = ref_logprobs - logprobs
        kl = torch.exp(delta) - delta - 1.0  # k3 estimator: unbiased, always >= 0
        token_loss = token_loss + beta * kl
        metrics["kl"] = ((kl * mask).sum() / mask.sum().clamp(min=1)).item()
    with torch.no_grad():
        metrics["clip_frac"] = (((unclipped - clipped).abs() > 0).to(mask.dtype) * mask).sum().item() / max(
            mask.sum().item(), 1.0
        )
    loss = LOSS_AGGREGATIONS[loss_agg](
        token_loss,
        mask,
        total_sequences=logprobs.shape[0] if total_sequences is None else total_sequences,
        total_tokens=int(mask.sum().item()) if total_tokens is None else total_tokens,
        max_len=logprobs.shape[1] if max_len is None else max_len,
    )
    return loss, metrics
