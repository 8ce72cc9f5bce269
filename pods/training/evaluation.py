"""Accuracy on the fixed held-out test set: greedy, or sampled with repeats (the paper: 5 at 0.9)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from pods.training.rollout.base import RolloutEngine, encode_prompts


@dataclass
class EvalSet:
    """Test problems with their prompts tokenised once for the whole run."""

    name: str
    problems: list
    prompt_ids: list[list[int]]

    @classmethod
    def build(cls, task, tokenizer, items: int | None = None, name: str = "test") -> "EvalSet":
        problems = task.test_problems()
        if items is not None:
            if items > len(problems):
                raise ValueError(f"eval_items = {items} exceeds the {len(problems)} test problems of {task.name!r}")
            problems = problems[:items]
        texts = [task.render_prompt(p, tokenizer) for p in problems]
        return cls(name, problems, encode_prompts(tokenizer, texts))


def evaluate(
    engine: RolloutEngine,
    task,
    tokenizer,
    eval_set: EvalSet,
    *,
    greedy: bool = True,
    repeats: int = 1,
    temperature: float = 1.0,
    max_new_tokens: int,
    batch_size: int = 256,
    seed: int = 0,
    rank: int = 0,
    world_size: int = 1,
    reduce: Callable[[list[float]], list[float]] | None = None,
) -> dict:
    """`accuracy` (mean over items x repeats of `task.is_correct`) and `mean_length` (tokens).

    Sampled evaluation uses its own generator seeded from `seed` and the batch index, so the same
    weights always give the same score and training's random stream is left untouched.
    With several processes each takes an equal contiguous share of the items (the last share
    padded with uncounted repeats, so that every process runs the same generation calls, which
    ZeRO-3 needs) and `reduce` sums the counts over processes.
    """
    N = len(eval_set.problems)
    share = -(-N // world_size)
    items = [min(i, N - 1) for i in range(rank * share, (rank + 1) * share)]
    counted = [rank * share + j < N for j in range(share)]
    correct, tokens, total = 0, 0, 0
    for b, start in enumerate(range(0, share, batch_size)):
        chunk = items[start:start + batch_size]
        rollouts = engine.generate(
            [eval_set.prompt_ids[i] for i in chunk], 1 if greedy else repeats, temperature=temperature,
            max_new_tokens=max_new_tokens, greedy=greedy,
            seed=None if greedy else (seed * 1_000_003 + b) * 1_009 + rank,
        )
        texts = tokenizer.batch_decode(rollouts.completion_ids, skip_special_tokens=True)
        for text, g, length in zip(texts, rollouts.group.tolist(), rollouts.lengths.tolist()):
            if counted[start + g]:
                correct += bool(task.is_correct(text, eval_set.problems[chunk[g]]))
                tokens += length
                total += 1
    if reduce is not None and world_size > 1:
        correct, tokens, total = reduce([correct, tokens, total])
    return {
        "eval_set": eval_set.name,
        "accuracy": correct / total,
        "mean_length": tokens / total,
        "n_items": len(eval_set.problems),
        "repeats": 1 if greedy else repeats,
    }
