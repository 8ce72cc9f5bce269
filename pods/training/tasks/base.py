"""What every benchmark provides to the trainer, the warm start and the evaluation."""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Problem:
    """One question with its verifiable gold answer.

    `meta` carries whatever the task needs to grade or demonstrate the problem (operands, source
    index, ...). It takes no part in equality, so two problems are the same problem when their
    question and answer are.
    """

    question: str
    answer: str
    meta: dict = field(default_factory=dict, compare=False, hash=False, repr=False)


class Task(ABC):
    """A benchmark: fixed train/test splits, prompt rendering and a verifiable reward.

    The same object serves the RL trainer (prompts, `reward`), the evaluation (`is_correct`, the
    accuracy metric) and, for the embedded procedural tasks, the supervised warm start.
    """

    #: registry name, e.g. "arith"; also the `benchmark` component of run directories
    name: str

    @abstractmethod
    def train_problems(self, seed: int) -> list[Problem]:
        """Training problems for `seed`; never contains a test question."""

    @abstractmethod
    def test_problems(self) -> list[Problem]:
        """The fixed held-out test set (the same list for every seed and run)."""

    @abstractmethod
    def render_prompt(self, problem: Problem, tokenizer) -> str:
        """The text the policy is conditioned on (raw text, or a chat template applied)."""

    @abstractmethod
    def reward(self, completion: str, problem: Problem) -> float:
        """Scalar training reward of one decoded completion (what the selection rule ranks)."""

    @abstractmethod
    def is_correct(self, completion: str, problem: Problem) -> bool:
        """Whether the completion's final answer is right: the accuracy metric of every curve."""

    #: seeds are in [0, seed_limit); None: any non-negative seed
    seed_limit: int | None = None

    @classmethod
    def hub_datasets(cls, options: dict) -> dict[str, str]:
        """Option name -> the hub dataset id that option reads, for the task built with `options`
        (what a workflow fetches once before training); {} for a task that builds its own data."""
        return {}

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


TEST_SEED = 2_000_000_000
TRAIN_SEED_STRIDE = 10_000_000  # generator item i of seed s is Random(s + i): keep seeds apart


class SeededSplitTask(Task):
    """A procedural task whose fixed test split and per-seed train splits come from `_generate`.

    Subclasses set `test_size`, `train_size`, `self._test = None` and implement
    `_generate(seed, size, exclude)`; train splits never contain a test question.
    """

    test_size: int
    train_size: int
    _test: list[Problem] | None
    seed_limit = TEST_SEED // TRAIN_SEED_STRIDE  # seed s draws from [s * stride, (s + 1) * stride)

    @abstractmethod
    def _generate(self, seed: int, size: int, exclude: set[str]) -> list[Problem]:
        """`size` distinct problems from `seed`, none of whose questions is in `exclude`."""

    def test_problems(self) -> list[Problem]:
        if self._test is None:
            self._test = self._generate(TEST_SEED, self.test_size, exclude=set())
        return self._test

    def train_problems(self, seed: int) -> list[Problem]:
        if not 0 <= seed < self.seed_limit:
            raise ValueError(f"task {self.name!r}: seed must be in [0, {self.seed_limit}), got {seed}")
        test_questions = {p.question for p in self.test_problems()}
        return self._generate(seed * TRAIN_SEED_STRIDE, self.train_size, exclude=test_questions)
