"""The update-engine interface: the policy, its optimiser, and one optimiser step per batch.

The trainer hands an engine the kept rollouts only (`UpdateBatch`, pods.training.batches), so every
per-rollout forward pass (log-probs, reference log-probs, the update) is paid for m rollouts per
prompt, never n. Every engine builds its optimiser and learning-rate schedule with
`make_optimizer` and `warmup_schedule`, so the three train with the same numbers.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path

import torch

from pods.training.batches import UpdateBatch  # noqa: F401  (what `step` takes, re-exported)


class UpdateEngine(ABC):
    """Owns the trained model and its optimiser; one `step` is one optimiser step."""

    #: the model the rollout engine samples from (the same object for the hf engine)
    policy: torch.nn.Module
    #: a frozen copy of the initial policy, kept only when beta > 0 or always_compute_ref
    reference: torch.nn.Module | None = None

    @abstractmethod
    def _logprobs_of(self, model: torch.nn.Module, batch: UpdateBatch) -> torch.Tensor:
        """Per-completion-token log-probs `[B, T]` of `batch` under `model`, no grad (0 on padding)."""

    def logprobs(self, batch: UpdateBatch) -> torch.Tensor:
        """Per-completion-token log-probs `[B, T]` under the current policy."""
        return self._logprobs_of(self.policy, batch)

    def ref_logprobs(self, batch: UpdateBatch) -> torch.Tensor:
        """Per-completion-token log-probs `[B, T]` under the reference (initial) policy.

        Needed only when `beta > 0`; a LoRA engine computes them with the adapter disabled.
        """
        if self.reference is None:
            raise ValueError("no reference model: it is kept only when beta > 0 or always_compute_ref")
        return self._logprobs_of(self.reference, batch)

    @abstractmethod
    def step(
        self,
        batch: UpdateBatch,
        advantages: torch.Tensor,
        old_logprobs: torch.Tensor | None = None,
        ref_logprobs: torch.Tensor | None = None,
    ) -> dict[str, float]:
        """One optimiser step on `batch` (`advantages[B]`), in micro-batches with accumulation.

        `old_logprobs=None` means the batch was sampled from the current weights (one step per
        generated batch): the ratio's denominator is then the detached log-prob of the same forward
        pass, so no separate pass is spent on it. Returns at least `loss`, `grad_norm`, `lr`.
        """

    @abstractmethod
    def state_dict(self) -> dict:
        """Everything needed to resume bit-exactly: model, optimiser, scheduler."""

    @abstractmethod
    def load_state_dict(self, state: dict) -> None:
        """Inverse of `state_dict`."""

    # An engine whose library writes part of the checkpoint itself, with a loader that unpickles
    # (DeepSpeed), names those files here; the trainer records their sha256 when they are written
    # and checks it before `load_state_dict` lets the library read them (pods.training.checkpoint).
    library_loader: str | None = None  # who unpickles them, for the resume message

    def checkpoint_files(self, state: dict) -> list[Path]:
        """Files under the run's checkpoint folder that `load_state_dict(state)` hands to a library."""
        return []


def make_optimizer(params, config, *, name: str = "adamw") -> torch.optim.Optimizer:
    """AdamW over `params` with the TrainConfig's lr, weight_decay and (adam_beta1, adam_beta2).

    `name`: `adamw` (torch) or `adamw_8bit` (bitsandbytes' AdamW8bit, the lora engine's option).
    """
    params = list(params)
    kwargs = dict(lr=config.lr, weight_decay=config.weight_decay, betas=(config.adam_beta1, config.adam_beta2))
    if name == "adamw_8bit":
        import bitsandbytes

        return bitsandbytes.optim.AdamW8bit(params, **kwargs)
    if name != "adamw":
        raise ValueError(f"config key 'optimizer': must be adamw or adamw_8bit, got {name!r}")
    return torch.optim.AdamW(params, **kwargs)


def warmup_schedule(optimizer: torch.optim.Optimizer, warmup_steps: int) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warm-up of the learning rate over `warmup_steps` optimiser steps, then constant.

    The factor at step s is min(1, (s + 1) / warmup_steps), so the first step already trains at
    lr / warmup_steps; `warmup_steps == 0` is a constant lr from the start.
    """
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min(1.0, (step + 1) / warmup_steps) if warmup_steps else 1.0
    )
