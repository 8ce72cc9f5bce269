"""Prompt groups between generation and the update: which prompts a step takes, their rewards,
which of their rollouts are kept, and DAPO's dynamic sampling of informative groups."""
from __future__ import annotations

import math

import numpy as np
import torch

from pods.training.batches import Rollouts


class PromptStream:
    """Training problems in a fresh seeded permutation per epoch; the position is the whole state."""

    def __init__(self, problems: list, seed: int, position: int = 0):
        if not problems:
            raise ValueError("the task returned no training problems")
        self.problems, self.seed, self.position = problems, seed, position
        self._epoch, self._order = -1, None

    def take(self, k: int) -> list:
        out = []
        for _ in range(k):
            epoch, index = divmod(self.position, len(self.problems))
            if epoch != self._epoch:
                self._epoch = epoch
                self._order = np.random.default_rng([self.seed, epoch]).permutation(len(self.problems))
            out.append(self.problems[self._order[index]])
            self.position += 1
        return out


def score(task, tokenizer, rollouts: Rollouts, problems: list) -> torch.Tensor:
    """Rewards `[G, n]` of the decoded completions."""
    texts = tokenizer.batch_decode(rollouts.completion_ids, skip_special_tokens=True)
    rewards = [task.reward(text, problems[g]) for text, g in zip(texts, rollouts.group.tolist())]
    return torch.tensor(rewards, dtype=torch.float64).view(len(problems), rollouts.n)


def kept_rows(kept: torch.Tensor, n: int) -> torch.Tensor:
    """Row indices into the `[G*n]` rollouts of the kept `[G, m]` per-group indices."""
    return (kept + torch.arange(kept.shape[0])[:, None] * n).flatten()


def zero_variance_frac(rewards: torch.Tensor) -> float:
    """Share of groups whose rewards are all equal: they carry no learning signal."""
    return (rewards.max(dim=1).values == rewards.min(dim=1).values).double().mean().item()


def dynamic_sample(first: tuple, draw, need: int, per_prompt: int, max_rounds: int, pad_id: int) -> tuple:
    """DAPO's dynamic sampling: the groups of `first` (rollouts, rewards, problems) whose rewards
    are not all equal, topped up from `draw(k)` (k fresh prompts, generated and scored) round by
    round until `need` groups are informative or `max_rounds` rounds ran. A dropped group reaches
    no selection and no forward pass. Returns (rollouts, rewards, problems, rounds); when no round
    gave an informative group, the last round's groups (their advantages are all zero)."""
    kept, have, rounds, batch = [], 0, 1, first
    while True:
        rollouts, rewards, problems = batch
        useful = (rewards.max(dim=1).values != rewards.min(dim=1).values).nonzero().flatten().tolist()
        useful = useful[: need - have]
        if useful:
            kept.append((rollouts.take_groups(useful), rewards[useful], [problems[g] for g in useful]))
            have += len(useful)
        if have >= need or rounds >= max_rounds:
            break
        batch = draw(math.ceil((need - have) / per_prompt))
        rounds += 1
    kept = kept or [batch]
    return (Rollouts.concat([k[0] for k in kept], pad_id), torch.cat([k[1] for k in kept]),
            [p for k in kept for p in k[2]], rounds)
