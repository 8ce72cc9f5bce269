"""Prompt groups between generation and the update: which prompts a step takes (and GRESO's
pre-rollout filter of them), their rewards, which of their rollouts are kept, and DAPO's dynamic
sampling of informative groups."""
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
        return [self.problems[index] for index in self.take_indices(k)]

    def take_indices(self, k: int) -> list[int]:
        """The next k problems as indices into `problems` (what `take` returns, by index)."""
        out = []
        for _ in range(k):
            epoch, index = divmod(self.position, len(self.problems))
            if epoch != self._epoch:
                self._epoch = epoch
                self._order = np.random.default_rng([self.seed, epoch]).permutation(len(self.problems))
            out.append(int(self._order[index]))
            self.position += 1
        return out


class PromptFilter:
    """GRESO's pre-rollout filter (arXiv 2506.02177; docs/field.md): skip, before generating, the
    prompts whose latest groups had no reward variance, with a probability that grows with how many
    such groups in a row they had.

    Each training problem's history is one signed count (`streak`): z > 0 when its latest z groups
    were all correct, -z when they were all wrong, 0 when its latest group was neither (or it was
    never generated). A drawn prompt is skipped with probability 1 - max(p ** z, keep_floor), p the
    base exploration probability of its kind (`p_easy`, `p_hard`); `keep_floor` is the exploration
    floor. After each step the two p adapt towards GRESO's targets (a third of `target_zero_variance`
    for all-correct groups, two thirds for all-wrong ones, among the groups the step generated), once
    the stream is past its first epoch. The skip draw of the prompt at stream position j is the
    uniform number of `default_rng([seed, SALT, j])`, so a resumed run makes the same decisions
    without any generator state; `state_dict` holds the rest.
    """

    SALT = 62177  # keeps these draws apart from the stream's own permutations ([seed, epoch])

    def __init__(self, size: int, seed: int, *, p_easy: float, p_hard: float, target_zero_variance: float,
                 p_step: float, p_min: float, p_max: float, keep_floor: float, correct_reward: float):
        self.streak = np.zeros(size, dtype=np.int64)
        self.seed, self.p_easy, self.p_hard = seed, p_easy, p_hard
        self.target_easy, self.target_hard = target_zero_variance / 3, target_zero_variance * 2 / 3
        self.p_step, self.p_min, self.p_max = p_step, p_min, p_max
        self.keep_floor, self.correct_reward = keep_floor, correct_reward
        self.easy = self.hard = self.groups = self.skipped = 0  # this step's counts
        self._pending: list[int] = []  # the prompts last let through, waiting for their rewards

    def skip_probability(self, index: int) -> float:
        z = int(self.streak[index])
        if z == 0:
            return 0.0
        p = self.p_easy if z > 0 else self.p_hard
        return 1.0 - max(p ** abs(z), self.keep_floor)

    def take(self, stream: PromptStream, k: int) -> list:
        """k prompts of `stream` that the filter lets through, in stream order; the skipped ones are
        consumed (GRESO drops them from the epoch) and counted."""
        kept: list[int] = []
        while len(kept) < k:
            position = stream.position
            (index,) = stream.take_indices(1)
            if np.random.default_rng([self.seed, self.SALT, position]).random() < self.skip_probability(index):
                self.skipped += 1
            else:
                kept.append(index)
        self._pending = kept
        return [stream.problems[index] for index in kept]

    def record(self, rewards: torch.Tensor) -> None:
        """The rewards `[k, n]` of the prompts of the last `take`, in order, into their histories."""
        if len(rewards) != len(self._pending):
            raise ValueError(f"{len(rewards)} groups of rewards for the {len(self._pending)} prompts last taken")
        correct = rewards >= self.correct_reward
        for index, easy, hard in zip(self._pending, correct.all(dim=1).tolist(), (~correct.any(dim=1)).tolist()):
            z = int(self.streak[index])
            self.streak[index] = max(z, 0) + 1 if easy else min(z, 0) - 1 if hard else 0
            self.easy, self.hard = self.easy + easy, self.hard + hard
        self.groups += len(self._pending)
        self._pending = []

    def end_step(self, epoch: int) -> dict:
        """After a step: adapt p_easy and p_hard (from the second epoch of the stream on, as GRESO
        does), reset the step's counts, and return the step record's filter fields."""
        if epoch > 0 and self.groups:
            def adapt(p: float, share: float, target: float) -> float:  # over target: skip more
                return max(p - self.p_step, self.p_min) if share >= target else min(p + self.p_step, self.p_max)

            self.p_easy = adapt(self.p_easy, self.easy / self.groups, self.target_easy)
            self.p_hard = adapt(self.p_hard, self.hard / self.groups, self.target_hard)
        record = {"prompts_skipped": self.skipped, "filter_p_easy": self.p_easy, "filter_p_hard": self.p_hard}
        self.easy = self.hard = self.groups = self.skipped = 0
        return record

    def state_dict(self) -> dict:
        held = np.flatnonzero(self.streak)
        return {"streak_index": held.tolist(), "streak": self.streak[held].tolist(), "p_easy": self.p_easy,
                "p_hard": self.p_hard}

    def load_state_dict(self, state: dict) -> None:
        self.streak[:] = 0
        self.streak[np.asarray(state["streak_index"], dtype=np.int64)] = np.asarray(state["streak"], dtype=np.int64)
        self.p_easy, self.p_hard = state["p_easy"], state["p_hard"]


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
