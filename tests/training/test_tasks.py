"""The embedded benchmarks: splits, grading against brute force, worked solutions."""
import random

import pytest

from pods.training.tasks import TASKS, Problem, Task, get_task
from pods.training.tasks.arith import partial_sums

EMBEDDED = ["arith", "arith_hard"]


@pytest.fixture(scope="module", params=EMBEDDED)
def task(request) -> Task:
    return get_task(request.param, train_size=3000)


def test_registry_is_a_plain_dict_and_unknown_names_fail_clearly():
    assert set(EMBEDDED) <= set(TASKS)
    with pytest.raises(ValueError, match="unknown benchmark 'gsm9k'"):
        get_task("gsm9k")


def test_test_split_is_fixed_large_and_distinct(task):
    test = task.test_problems()
    assert len(test) >= 1000
    assert len({p.question for p in test}) == len(test)
    again = get_task(task.name).test_problems()  # a fresh object rebuilds the same split
    assert [p.question for p in again] == [p.question for p in test]


def test_train_split_never_overlaps_test_and_depends_on_seed(task):
    test_questions = {p.question for p in task.test_problems()}
    train0, train1 = task.train_problems(0), task.train_problems(1)
    assert len(train0) == 3000 and len({p.question for p in train0}) == 3000
    assert not test_questions & {p.question for p in train0}
    assert not test_questions & {p.question for p in train1}
    assert [p.question for p in task.train_problems(0)] == [p.question for p in train0]
    assert [p.question for p in train0] != [p.question for p in train1]


def test_answers_agree_with_python_arithmetic(task):
    for p in task.test_problems()[:300] + task.train_problems(0)[:300]:
        assert p.question.endswith("=")
        assert int(p.answer) == eval(p.question[:-1])  # the question is a plain +/- expression
        assert task.min_terms <= len(p.meta["operands"]) <= task.max_terms
        assert all(0 <= x <= 9 for x in p.meta["operands"])


def test_worked_solution_is_correct_well_formed_and_ends_with_the_answer(task):
    for p in task.test_problems()[:200]:
        solution = task.worked_solution(p)
        steps, answer = solution.split("#")
        assert answer == p.answer == steps.split(",")[-1]
        assert len(steps.split(",")) == len(p.meta["ops"])
        assert task.is_correct(solution, p) and task.reward(solution, p) == 1.0


def test_noisy_solutions_are_wrong_at_the_requested_rate(task):
    rng = random.Random(0)
    problems = task.train_problems(0)[:2000]
    wrong = [not task.is_correct(task.worked_solution(p, rng, error_rate=0.35), p) for p in problems]
    assert 0.31 < sum(wrong) / len(wrong) < 0.39
    # an error in one partial sum propagates: the chain stays internally consistent
    p = problems[0]
    noisy = next(s for s in (task.worked_solution(p, rng, 1.0) for _ in range(10)))
    steps = [int(x) for x in noisy.split("#")[0].split(",")]
    ops, xs = p.meta["ops"], p.meta["operands"]
    diffs = [b - a for a, b in zip([xs[0]] + steps[:-1], steps)]
    truth = [x if op == "+" else -x for op, x in zip(ops, xs[1:])]
    assert sum(d != t for d, t in zip(diffs, truth)) == 1


def test_grading_brute_force():
    task = get_task("arith")
    p = Problem("4+7-8=", "3", {"operands": [4, 7, 8], "ops": ["+", "-"]})
    cases = {
        "11,3#3": (True, 1.0),
        "11,3# 3": (True, 1.0),
        "11,4#4": (False, 0.1),  # wrong but in the worked format: the GSM8K-style format bonus
        "11,3,3#3": (True, 1.0),  # graded on the final answer only
        "11,3,4#4": (False, 0.0),  # wrong number of steps: no bonus
        "3": (False, 0.0),  # no answer mark
        "11,3#-3": (False, 0.1),  # the bonus is for structure only, as in the paper
        "11,3#33": (False, 0.1),  # reasoning-gym's substring partial credit is not accuracy
        "11,3#": (False, 0.0),
        "": (False, 0.0),
    }
    for completion, (correct, reward) in cases.items():
        assert task.is_correct(completion, p) is correct, completion
        assert task.reward(completion, p) == pytest.approx(reward), completion
    hard = get_task("arith_hard")
    assert hard.reward("11,4#4", p) == 0.0  # binary reward on the MATH stand-in


def test_partial_sums():
    assert partial_sums([4, 1, 7], ["-", "-"]) == [3, -4]
    assert partial_sums([9, 9, 0, 5], ["+", "-", "+"]) == [18, 18, 23]


def test_small_splits_are_drawn():
    task = get_task("arith", test_size=10, train_size=50)
    assert len(task.test_problems()) == 10 and len(task.train_problems(0)) == 50


def test_bad_options_fail_before_any_work():
    with pytest.raises(ValueError, match="min_terms"):
        get_task("arith", min_terms=5, max_terms=4)
    with pytest.raises(ValueError, match="format_bonus"):
        get_task("arith", format_bonus=1.5)
