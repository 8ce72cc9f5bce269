"""The paper's reward functions on realistic GSM8K / MATH completions (docs/paper.md 2.1.5 and 2.2)."""
import pytest

from pods.training.tasks import rewards as R

# What a Qwen2.5-Instruct completion under the paper's system prompt looks like.
EGGS_RIGHT = (
    "<think>\nJanet's ducks lay 16 eggs a day. She eats 3 and bakes with 4, so 16 - 3 - 4 = 9 eggs "
    "are left. She sells each for $2, so she makes 9 * 2 = 18 dollars.\n</think>\n"
    "<answer>\nShe makes $18 every day at the farmers' market.\n</answer>"
)
EGGS_WRONG = (
    "<think>\nJanet's ducks lay 16 eggs a day. She eats 3, so 16 - 3 = 13 eggs are left. "
    "She sells each for $2, so she makes 13 * 2 = 26 dollars.\n</think>\n<answer>\n26\n</answer>"
)
EGGS_WRONG_RAMBLING = EGGS_WRONG + "\nI hope this helps! Let me know if you have more questions."
EGGS_WRONG_NO_TAGS = "She makes 16 - 3 = 13, and 13 * 2 = 26 dollars a day."
HOUSE_RIGHT = (
    "<think>\nJosh spends $80,000 + $50,000 = $130,000. The value grows by 150%: 80,000 * 2.5 = "
    "200,000. Profit: 200,000 - 130,000 = 70,000.\n</think>\n<answer>\n$70,000\n</answer>"
)
# open-r1 style: the answer in LaTeX, exact newline layout.
R1_BOXED = "<think>\n16 - 3 - 4 = 9 and 9 * 2 = 18.\n</think>\n<answer>\n\\boxed{18}\n</answer>"
R1_BARE = "<think>\n16 - 3 - 4 = 9 and 9 * 2 = 18.\n</think>\n<answer>\n18\n</answer>"
# MATH-style: LaTeX answers, equal in value but not in text.
MATH_HALF = (
    "<think>\nThe probability is $\\frac{3}{6}$, which simplifies.\n</think>\n"
    "<answer>\n$\\dfrac{1}{2}$\n</answer>"
)
MATH_POLAR = (
    "<think>\n$r = \\sqrt{0^2 + 3^2} = 3$ and the point is on the positive $y$-axis, so "
    "$\\theta = \\frac{\\pi}{2}$.\n</think>\n<answer>\n$\\left( 3, \\frac{\\pi}{2} \\right)$\n</answer>"
)


def test_gold_extraction():
    assert R.gsm8k_gold("She has 16 - 3 - 4 = <<16-3-4=9>>9 eggs.\n#### 18") == "18"
    assert R.gsm8k_gold("Total is 1,000 + 200\n#### 1,200") == "1200"
    with pytest.raises(ValueError, match="####"):
        R.gsm8k_gold("no answer line")
    solution = "So $x = \\frac{1}{2}$ first, and finally $\\boxed{\\frac{\\sqrt{3}}{2}}$."
    assert R.last_boxed(solution) == "\\frac{\\sqrt{3}}{2}"  # nested braces kept whole
    assert R.last_boxed("\\boxed{1} then \\boxed{(3, \\frac{\\pi}{2})}") == "(3, \\frac{\\pi}{2})"
    assert R.last_boxed("The answer is $\\boxed 5$.") == "5"
    assert R.last_boxed("no box") is None


def test_pieces():
    assert R.answer_block(EGGS_RIGHT) == "She makes $18 every day at the farmers' market."
    assert R.last_number("paid 1,250.5 dollars.", R.LAST_INTEGER) == "5"
    assert R.last_number("paid 1,250.5 dollars.", R.LAST_NUMBER) == "1,250.5"
    assert R.last_number("no digits") == ""


def test_correctness_is_lenient_and_value_based():
    assert R.is_correct(EGGS_RIGHT, "18")
    assert not R.is_correct(EGGS_WRONG, "18")
    assert R.is_correct(EGGS_WRONG_NO_TAGS, "26")  # no tags: the last number still counts
    assert R.is_correct(HOUSE_RIGHT, "70000")  # thousands separator
    assert R.is_correct(MATH_HALF, "\\frac{1}{2}")
    assert R.is_correct(MATH_HALF, "0.5")
    assert R.is_correct(MATH_POLAR, "\\left( 3, \\frac{\\pi}{2} \\right)")
    assert not R.is_correct(MATH_POLAR, "(3, \\pi)")
    assert not R.is_correct("", "18")


def test_gsm8k_reward_format_bonus_only_when_wrong():
    assert R.gsm8k_reward(EGGS_RIGHT, "18") == 1.0  # correct: no bonus
    assert R.gsm8k_reward(EGGS_WRONG, "18") == pytest.approx(0.1 + 0.1)  # perfect format, 4 tags
    extra = len(EGGS_WRONG_RAMBLING) - len(EGGS_WRONG)
    assert R.format_score(EGGS_WRONG_RAMBLING) == pytest.approx(0.1 - 0.001 * extra)
    assert R.gsm8k_reward(EGGS_WRONG_RAMBLING, "18") == pytest.approx(0.1 - 0.001 * extra + 0.1)
    assert R.gsm8k_reward(EGGS_WRONG_NO_TAGS, "18") == 0.0
    # a repeated tag loses its 0.025 and nothing else
    doubled = EGGS_WRONG.replace("</think>", "</think>\n</think>")
    assert R.xml_count(doubled) == pytest.approx(0.075)


def test_binary_reward_ignores_format():
    assert R.binary_reward(MATH_HALF, "\\frac12") == 1.0
    assert R.binary_reward(EGGS_WRONG, "18") == 0.0
    assert R.binary_reward("The answer is $\\frac{1}{2}$.", "\\frac{1}{2}") == 1.0


def test_llama_reward_always_adds_format_terms():
    assert R.llama_reward(EGGS_RIGHT, "18") == pytest.approx(1.2)
    assert R.llama_reward(EGGS_WRONG, "18") == pytest.approx(0.2)
    assert R.llama_reward(EGGS_WRONG_NO_TAGS, "26") == pytest.approx(1.0)
    # the same numbers as the 0.1 * (1 - 0.01 * extra) + 0.1 * 0.25 * tags of the Llama commit
    extra = len(EGGS_WRONG_RAMBLING) - len(EGGS_WRONG)
    assert R.llama_reward(EGGS_WRONG_RAMBLING, "26") == pytest.approx(1 + 0.1 * (1 - 0.01 * extra) + 0.1)


def test_open_r1_needs_latex_answers():
    assert R.open_r1_reward(R1_BOXED, "18") == 3.0
    assert R.open_r1_reward(R1_BARE, "18") == 2.0  # a plain "18" is not a LaTeX answer
    assert R.latex_accuracy("so the answer is $18$", "18") == 1.0
    assert R.r1_format(EGGS_WRONG) == 1.0 and R.r1_tag_count(EGGS_WRONG) == 1.0
    assert R.r1_format(" " + EGGS_WRONG) == 0.0  # anchored at the start
    assert R.r1_format(EGGS_WRONG.replace("\n</answer>", "</answer>")) == 0.0
    # open-r1 matches with re.MULTILINE, so "$" also matches before a newline: text after the
    # closing tag on later lines still passes (kept as the recipe had it).
    assert R.r1_format(EGGS_WRONG_RAMBLING) == 1.0


def test_eval_metrics():
    assert R.get_metric("ans_acc")(EGGS_RIGHT, "18") == 1.0
    assert R.get_metric("for_acc")(EGGS_WRONG, "18") == 1.0
    assert R.get_metric("both_acc")(EGGS_WRONG_NO_TAGS, "26") == 0.0  # right answer, no format
    assert R.get_metric("both_acc")("\n" + EGGS_RIGHT + "\n", "18") == 1.0


def test_registry_rejects_unknown_names():
    assert set(R.REWARDS) == {"gsm8k", "binary", "llama", "open_r1"}
    with pytest.raises(ValueError, match="nope"):
        R.get_reward("nope")
    with pytest.raises(ValueError, match="nope"):
        R.get_metric("nope")


def test_system_prompt_matches_the_released_evaluation_prompts():
    # the released examples render the system turn as "<|im_start|>system\n\nYou will be given..."
    assert R.SYSTEM_PROMPT.startswith("\nYou will be given a math question.\n")
    assert "<think>\nReason here." in R.SYSTEM_PROMPT and R.SYSTEM_PROMPT.endswith("</answer>\n")
