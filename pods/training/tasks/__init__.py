"""Benchmark registry: name -> factory returning a `Task`.

Embedded procedural benchmarks (offline, built by the package):
- `arith`: 3-4 single-digit terms, worked partial sums; reward = correctness, or 0.1 for a wrong
  answer in the exact worked format (the GSM8K stand-in: the paper's GSM8K reward adds small
  format bonuses to wrong answers).
- `arith_hard`: 5-6 terms, binary correctness reward (the MATH stand-in: "MATH-NF" runs).
"""
from __future__ import annotations

from functools import partial
from typing import Callable

from pods.registry import Registry
from pods.training.tasks.arith import ChainArithmetic
from pods.training.tasks.base import Problem, Task
from pods.training.tasks.gsm8k import GSM8K
from pods.training.tasks.math import AMC23, Math500, MathTrain
from pods.training.tasks.reasoning_gym import ReasoningGymTask

TASKS: Registry[Callable[..., Task]] = Registry("benchmark", {
    "arith": partial(ChainArithmetic, name="arith", min_terms=3, max_terms=4, format_bonus=0.1),
    "arith_hard": partial(ChainArithmetic, name="arith_hard", min_terms=5, max_terms=6, format_bonus=0.0),
    "gsm8k": GSM8K,
    "gsm8k_llama": partial(GSM8K, reward="llama", metric="both_acc"),
    "gsm8k_r1": partial(GSM8K, reward="open_r1", metric="latex_accuracy"),
    "math": MathTrain,
    "math500": Math500,
    "amc23": AMC23,
    "gym_chain_sum": partial(ReasoningGymTask, name="gym_chain_sum", dataset="chain_sum",
                             dataset_options=dict(min_terms=2, max_terms=2, min_digits=1, max_digits=1), test_size=60,
                             train_size=120),
})


def task_class(name: str) -> type[Task]:
    """The class behind a registry name (its factory may be a `partial` with preset options)."""
    factory = TASKS[name]
    return factory.func if isinstance(factory, partial) else factory


def get_task(name: str, **options) -> Task:
    """Build the benchmark `name`; `options` override the factory's defaults (e.g. test_size)."""
    return TASKS[name](**options)


__all__ = ["TASKS", "Problem", "Task", "get_task", "task_class"]
