"""The two batches the phases of a step hand each other, shared by the rollout and update packages.

- `Rollouts`: what a rollout engine returns (`pods.training.rollout`): n completions for each of G prompts.
- `UpdateBatch`: what the trainer hands an update engine (`pods.training.update`): the kept rollouts only,
  as model input, so every per-rollout forward pass is paid for m rollouts per prompt, never n.

Neither package imports the other; both import this module (`pods.training.rollout.Rollouts` and
`pods.training.update.UpdateBatch` are these classes).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Rollouts:
    """n completions for each of G prompts, as padded token tensors.

    Rows g*n .. g*n + n - 1 belong to prompt g. A completion ends with its EOS token when it
    stopped (the EOS counts as a generated token: the policy chose it) or at `max_new_tokens`
    when it did not; after that the row holds the pad id and `completion_mask` is 0.
    """

    prompt_ids: list[list[int]]  # the G prompts, unpadded
    completion_ids: torch.Tensor  # [G*n, T] long
    completion_mask: torch.Tensor  # [G*n, T] long, 1 on generated tokens
    group: torch.Tensor  # [G*n] long, the prompt index of each row
    n: int

    def __len__(self) -> int:
        return self.completion_ids.shape[0]

    @property
    def lengths(self) -> torch.Tensor:
        """Generated tokens per row, [G*n]."""
        return self.completion_mask.sum(dim=1)

    @property
    def num_tokens(self) -> int:
        return int(self.completion_mask.sum())

    def take_groups(self, groups: list[int]) -> "Rollouts":
        """The rollouts of the prompts `groups` (indices into the G prompts), renumbered 0, 1, ..."""
        rows = torch.tensor([g * self.n + j for g in groups for j in range(self.n)], dtype=torch.long,
                            device=self.completion_ids.device)
        return Rollouts([self.prompt_ids[g] for g in groups], self.completion_ids[rows], self.completion_mask[rows],
                        torch.arange(len(groups), device=self.group.device).repeat_interleave(self.n), self.n)

    @classmethod
    def concat(cls, parts: list["Rollouts"], pad_id: int) -> "Rollouts":
        """One batch of the prompts of `parts` in order (completions padded to the longest)."""
        width = max(p.completion_ids.shape[1] for p in parts)

        def pad(x: torch.Tensor, value: int) -> torch.Tensor:
            return torch.nn.functional.pad(x, (0, width - x.shape[1]), value=value)

        offsets = torch.tensor([0, *(len(p.prompt_ids) for p in parts)]).cumsum(0)
        return cls([ids for p in parts for ids in p.prompt_ids],
                   torch.cat([pad(p.completion_ids, pad_id) for p in parts]),
                   torch.cat([pad(p.completion_mask, 0) for p in parts]),
                   torch.cat([p.group + int(offset) for p, offset in zip(parts, offsets)]), parts[0].n)


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
        return self.take(slice(start, stop))

    def take(self, rows: slice | torch.Tensor) -> "UpdateBatch":
        """The rows `rows` (a slice or a tensor of row indices, in that order), trimmed as `slice` trims."""
        attention = self.attention_mask[rows]
        completion = self.completion_mask[rows]
        used = completion.any(dim=0).nonzero()
        T = int(used.max()) + 1 if len(used) else 1
        drop_right = self.completion_len - T
        left = int((attention.any(dim=0)).nonzero().min())
        end = attention.shape[1] - drop_right
        return UpdateBatch(
            input_ids=self.input_ids[rows][:, left:end],
            attention_mask=attention[:, left:end],
            completion_mask=completion[:, :T],
        )

    def to(self, device: torch.device | str) -> "UpdateBatch":
        return UpdateBatch(*(t.to(device) for t in (self.input_ids, self.attention_mask, self.completion_mask)))
