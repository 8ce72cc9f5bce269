"""The update-engine interface: the policy, its optimiser, and one optimiser step per batch.

The trainer hands an engine the kept rollouts only (`UpdateBatch`), so every per-rollout forward
pass (log-probs, reference log-probs, the update) is paid for m rollouts per prompt, never n.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import torch

from pods.rollout.base import Rollouts


@dataclass
class UpdateBatch:
    """Kept rollouts as model input: each row is its prompt (left-padded) then its completion.

    `input_ids[:, -T:]` are the completion tokens, `completion_mask` marks which of them were
    generated (1) or are padding after the end (0).
    """

    input_ids: torch.Tensor  # [B, P + T] long
    attention_mask: torch.Tensor  # [B, P + T] long
    completion_mask: torch.Tensor  # [B, T] long

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    @property
    def completion_len(self) -> int:
        return self.completion_mask.shape[1]

    @property
    def num_tokens(self) -> int:
        """Completion tokens the loss is computed on."""
        return int(self.completion_mask.sum())

    @classmethod
    def from_rollouts(cls, rollouts: Rollouts, rows: torch.Tensor, pad_id: int) -> "UpdateBatch":
        """The rows `rows` of `rollouts` (indices into its G*n rows), in that order."""
        rows = rows.tolist() if isinstance(rows, torch.Tensor) else list(rows)
        groups = rollouts.group[rows].tolist()
        prompts = [rollouts.prompt_ids[g] for g in groups]
        width = max(len(p) for p in prompts)
        prompt_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
        prompt_mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, p in enumerate(prompts):
            prompt_ids[i, width - len(p):] = torch.tensor(p, dtype=torch.long)
            prompt_mask[i, width - len(p):] = 1
        completion_ids = rollouts.completion_ids[rows]
        completion_mask = rollouts.completion_mask[rows].long()
        return cls(
            input_ids=torch.cat([prompt_ids, completion_ids], dim=1),
            attention_mask=torch.cat([prompt_mask, completion_mask], dim=1),
            completion_mask=completion_mask,
        )

    def slice(self, start: int, stop: int) -> "UpdateBatch":
        """Rows start..stop-1, with columns that are padding in every one of them dropped.

        Left: prompt padding shared by all rows; right: completion columns after every row ended.
        Dropping them is exact (masked positions never reach a kept token) and saves compute;
        `completion_mask` keeps its first columns, so results align with the full batch's.
        """
        attention = self.attention_mask[start:stop]
        completion = self.completion_mask[start:stop]
        used = completion.any(dim=0).nonzero()
        T = int(used.max()) + 1 if len(used) else 1
        drop_right = self.completion_len - T
        left = int((attention.any(dim=0)).nonzero().min())
        end = attention.shape[1] - drop_right
        return UpdateBatch(
            input_ids=self.input_ids[start:stop, left:end],
            attention_mask=attention[:, left:end],
            completion_mask=completion[:, :T],
        )

    def to(self, device: torch.device | str) -> "UpdateBatch":
        return UpdateBatch(*(t.to(device) for t in (self.input_ids, self.attention_mask, self.completion_mask)))


class UpdateEngine(ABC):
    """Owns the trained model and its optimiser; one `step` is one optimiser step."""

    #: the model the rollout engine samples from (the same object for the hf engine)
    policy: torch.nn.Module

    @abstractmethod
    def logprobs(self, batch: UpdateBatch) -> torch.Tensor:
        """Per-completion-token log-probs `[B, T]` under the current policy, no grad (0 on padding)."""

    @abstractmethod
    def ref_logprobs(self, batch: UpdateBatch) -> torch.Tensor:
        """Per-completion-token log-probs `[B, T]` under the reference (initial) policy, no grad.

        Needed only when `beta > 0`; a LoRA engine computes them with the adapter disabled.
        """

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
