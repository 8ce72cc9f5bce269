"""Embedded procedural benchmarks: chains of single-digit additions and subtractions.

Stand-ins for GSM8K (`arith`, 3-4 terms, reward = correctness + a small format bonus when wrong,
as the paper's GSM8K reward) and MATH (`arith_hard`, 5-6 terms, binary correctness reward, as the
paper's "MATH-NF" runs). Problems come from reasoning-gym's `chain_sum` generator and answers are
graded with its scorer; only the text format is ours, chosen for a tiny character-level policy:

    prompt      "4-1-7="
    completion  "3,-4#-4"      running partial sums, then '#' and the final answer

Writing the partial sums turns one long mental sum into a few single-digit steps a 1M-parameter
model can learn, and makes "more terms" a clean difficulty knob (more steps to get right).
"""
from __future__ import annotations

import random
import re

import reasoning_gym
from reasoning_gym.utils import compute_decimal_reward

from pods.training.tasks.base import Problem, SeededSplitTask

ANSWER_MARK = "#"
STEP_SEP = ","
# Seed of the fixed test split; train splits use disjoint seed ranges (see `_generate`).


def _parse_expression(expression: str) -> tuple[list[int], list[str]]:
    """'4 - 1 - 7' -> ([4, 1, 7], ['-', '-'])."""
    parts = expression.split()
    return [int(p) for p in parts[0::2]], parts[1::2]


def partial_sums(operands: list[int], ops: list[str]) -> list[int]:
    """Running results after each operator: [4, 1, 7], ['-', '-'] -> [3, -4]."""
    sums, acc = [], operands[0]
    for op, x in zip(ops, operands[1:]):
        acc = acc + x if op == "+" else acc - x
        sums.append(acc)
    return sums


class ChainArithmetic(SeededSplitTask):
    """Single-digit +/- chains with worked partial sums; see the module docstring.

    Args:
        name: registry name.
        min_terms, max_terms: number of operands per problem (reasoning-gym `chain_sum` range).
        format_bonus: reward of a wrong answer written in the exact worked format (the right number
            of partial sums, then '#' and an integer). The paper's GSM8K reward gives wrong answers
            up to 0.2 for format; 0 gives the binary reward of its MATH runs.
        test_size: size of the fixed test split (distinct questions).
        train_size: number of training problems per seed (distinct from each other and from test).
    """

    def __init__(
        self,
        name: str,
        min_terms: int,
        max_terms: int,
        format_bonus: float = 0.0,
        test_size: int = 1000,
        train_size: int = 20_000,
    ):
        if not 2 <= min_terms <= max_terms:
            raise ValueError(f"task {name!r}: need 2 <= min_terms <= max_terms, got {min_terms}, {max_terms}")
        if not 0.0 <= format_bonus < 1.0:
            raise ValueError(f"task {name!r}: format_bonus must be in [0, 1), got {format_bonus}")
        self.name = name
        self.min_terms, self.max_terms = min_terms, max_terms
        self.format_bonus = float(format_bonus)
        self.test_size, self.train_size = int(test_size), int(train_size)
        self._test: list[Problem] | None = None

    # ----------------------------------------------------------------------------------- splits
    def _generate(self, seed: int, size: int, exclude: set[str]) -> list[Problem]:
        """`size` distinct problems from chain_sum at `seed`, skipping questions in `exclude`."""
        problems: dict[str, Problem] = {}
        chunk = max(size, 1000)
        offset = 0
        while len(problems) < size:
            data = reasoning_gym.create_dataset(
                "chain_sum", min_terms=self.min_terms, max_terms=self.max_terms,
                min_digits=1, max_digits=1, seed=seed + offset, size=chunk,
            )
            for item in data:
                problem = self._to_problem(item)
                if problem.question not in exclude and problem.question not in problems:
                    problems[problem.question] = problem
                    if len(problems) == size:
                        break
            offset += chunk
            if len(problems) < size and offset > 50 * chunk:
                raise ValueError(
                    f"task {self.name!r}: cannot draw {size} distinct problems "
                    f"({len(problems)} found); lower train_size/test_size"
                )
        return list(problems.values())

    @staticmethod
    def _to_problem(item: dict) -> Problem:
        operands, ops = _parse_expression(item["metadata"]["expression"])
        question = "".join(f"{x}{op}" for x, op in zip(operands, ops + ["="]))
        return Problem(question, item["answer"], {"operands": operands, "ops": ops})

    # ---------------------------------------------------------------------------------- grading
    def render_prompt(self, problem: Problem, tokenizer=None) -> str:
        return problem.question

    @staticmethod
    def final_answer(completion: str) -> str | None:
        """The text after the last answer mark, or None when there is none."""
        if ANSWER_MARK not in completion:
            return None
        return completion.rsplit(ANSWER_MARK, 1)[1].strip()

    def is_correct(self, completion: str, problem: Problem) -> bool:
        # reasoning-gym's scorer gives partial credit for substrings; accuracy counts exact answers
        return compute_decimal_reward(self.final_answer(completion), oracle_answer=problem.answer) == 1.0

    def is_well_formed(self, completion: str, problem: Problem) -> bool:
        """Worked format: one partial sum per operator, then the answer mark and an integer."""
        n_steps = len(problem.meta["ops"])
        return re.fullmatch(
            rf"(?:-?\d+{STEP_SEP}){{{n_steps - 1}}}-?\d+{ANSWER_MARK}-?\d+", completion.strip()
        ) is not None

    def reward(self, completion: str, problem: Problem) -> float:
        if self.is_correct(completion, problem):
            return 1.0
        if self.format_bonus and self.is_well_formed(completion, problem):
            return self.format_bonus
        return 0.0

    # ---------------------------------------------------------------------- worked solutions
    def worked_solution(self, problem: Problem, rng: random.Random | None = None, error_rate: float = 0.0) -> str:
        """The supervised target: partial sums, '#', the final answer.

        With probability `error_rate` one partial sum is off by 1 or 2 and the chain continues from
        the wrong value (so the final answer is wrong too): a warm start on such targets samples the
        right answer often but not always, the headroom RL with a verifiable reward can reach.
        """
        operands, ops = problem.meta["operands"], problem.meta["ops"]
        sums = partial_sums(operands, ops)
        if error_rate > 0.0 and rng is not None and rng.random() < error_rate:
            step = rng.randrange(len(sums))
            wrong = sums[step] + rng.choice([-2, -1, 1, 2])
            tail = partial_sums([wrong] + operands[step + 2:], ops[step + 1:])
            sums = sums[:step] + [wrong] + tail
        return STEP_SEP.join(map(str, sums)) + ANSWER_MARK + str(sums[-1])
