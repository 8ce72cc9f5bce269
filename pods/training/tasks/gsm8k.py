"""GSM8K (openai/gsm8k, config "main"): grade-school word problems, gold after `####`.

The paper's main single-GPU benchmark. The default reward is the paper's GSM8K reward
(`rewards.gsm8k_reward`: 1.0 if correct, else up to 0.2 of format credit); the Llama runs use
`reward="llama", metric="both_acc"` and the 8-GPU runs `reward="open_r1", metric="latex_accuracy"`.
Loading, prompt rendering and the length filter are those of `pods.training.tasks.math.HubMathTask`.
"""
from __future__ import annotations

from typing import Iterable

from pods.training.tasks.base import Problem
from pods.training.tasks.math import HubMathTask, load_split
from pods.training.tasks.rewards import gsm8k_gold


class GSM8K(HubMathTask):
    name = "gsm8k"
    default_source = "openai/gsm8k"
    config = "main"

    def __init__(self, *args, reward: str = "gsm8k", **kwargs):
        super().__init__(*args, reward=reward, **kwargs)

    def _rows(self, split: str) -> Iterable[Problem]:
        for i, row in enumerate(load_split(self.split_source(split), self.config, split)):
            yield Problem(row["question"], gsm8k_gold(row["answer"]), {"source": f"{split}/{i}"})
