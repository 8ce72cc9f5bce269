"""The paper's prompts and reward functions for GSM8K / MATH, as small pure functions.

Every reward is `fn(completion: str, gold: str) -> float`, registered by name in `REWARDS`.
Correctness is graded with math-verify. The format terms follow the setting (docs/paper.md 2.1.5, 2.2):

- `gsm8k`    (single GPU, Qwen, GSM8K):  1.0 if correct, else format_score + xml_count (in [0, 0.2]).
             Correct answers get no format bonus, so a group's rewards are "1.0 or a bit of credit".
- `binary`   (single GPU, Qwen, MATH-NF): 1.0 if correct, else 0.0.
- `llama`    (single GPU, Llama, GSM8K):  correctness + format_score + xml_count, always added
             (in [0, 1.2]); the last-number fallback also accepts decimals and thousands separators.
- `open_r1`  (8 GPUs, open-r1 recipe):    latex_accuracy + r1_format + r1_tag_count (in [0, 3]);
             the answer must be in LaTeX form (`\\boxed{}` or `$...$`): a bare "18" scores 0.

The authors graded single-GPU correctness with a sympy/latex normaliser copied from another
project; we grade with math-verify (the package the field uses and the multi-GPU recipe used), on
the same three candidates (whole completion, last `<answer>` block, last number).
"""
from __future__ import annotations

import re
import threading
from typing import Callable

from latex2sympy2_extended import NormalizationConfig
from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

from pods.registry import Registry

# The system turn of every instruct prompt in the paper, verbatim (leading newline included: the
# authors' released evaluation prompts show it right after the chat template's system header).
SYSTEM_PROMPT = (
    "\nYou will be given a math question.\n"
    "Reason about the question and correct your own mistakes if you make any.\n"
    "\n"
    "Respond in the following format:\n"
    "<think>\n"
    "Reason here. Decide to answer when you are confident as your response length is limited.\n"
    "</think>\n"
    "<answer>\n"
    "Answer here.\n"
    "</answer>\n"
)

# The single-GPU release graded the last run of digits; the Llama commit widened it so that
# "1,250" and "2.5" are taken whole. (That commit's `[\d\.\,]+` also matches a sentence's final
# "."; requiring a leading digit keeps the intent.)
LAST_INTEGER = r"\d+"
LAST_NUMBER = r"\d[\d\.\,]*"

_LOOSE_FORMAT = re.compile(r"<think>.*</think>[ \n]?<answer>.*</answer>", re.DOTALL)
_STRICT_FORMAT = re.compile(r"^[ \n]?<think>.*</think>[ \n]?<answer>.*</answer>[ \n]?$", re.DOTALL)
_R1_FORMAT = re.compile(r"^<think>\n.*?\n</think>\n<answer>\n.*?\n</answer>$", re.DOTALL | re.MULTILINE)

# open-r1's accuracy_reward: LaTeX only, boxed first, no bare-number fallback.
_R1_EXTRACTION = [
    LatexExtractionConfig(
        normalization_config=NormalizationConfig(
            nits=False, malformed_operators=False, basic_latex=True, boxed="all", units=True
        ),
        boxed_match_priority=0,
        try_extract_without_anchor=False,
    )
]
_LENIENT_EXTRACTION = [LatexExtractionConfig(), ExprExtractionConfig()]


def _timeout() -> int | None:
    # math-verify times out with signal.alarm, which only the main thread may use.
    return 5 if threading.current_thread() is threading.main_thread() else None


def _parse(text: str, config) -> list:
    return parse(text, extraction_config=config, parsing_timeout=_timeout())


def _parse_gold(gold: str) -> list:
    # Golds are bare answers ("72", "\frac{1}{2}", "(3, \frac{\pi}{2})"); boxing them lets the
    # LaTeX extractor read every one of them the same way.
    return _parse(f"\\boxed{{{gold}}}", _LENIENT_EXTRACTION)


def _verify(gold_parsed: list, text: str, config) -> bool:
    if not gold_parsed or not text.strip():
        return False
    return bool(verify(gold_parsed, _parse(text, config), timeout_seconds=_timeout()))


# ---------------------------------------------------------------------------------------------
# Pieces of text
# ---------------------------------------------------------------------------------------------
def answer_block(text: str) -> str:
    """Text of the last `<answer>` block (the whole tail if it was never closed)."""
    return text.split("<answer>")[-1].split("</answer>")[0].strip()


def last_number(text: str, pattern: str = LAST_INTEGER) -> str:
    """Last match of `pattern` in `text`, or "" when there is none."""
    found = re.findall(pattern, text)
    return found[-1].strip(".,") if found else ""


def gsm8k_gold(solution: str) -> str:
    """GSM8K's gold: the text after `####`, thousands separators removed ("#### 1,200" -> "1200")."""
    if "####" not in solution:
        raise ValueError(f"GSM8K solution has no '####' answer line: {solution[-80:]!r}")
    return solution.split("####")[-1].strip().replace(",", "")


def last_boxed(text: str) -> str | None:
    """Content of the last `\\boxed{...}` (or `\\fbox{...}`), braces matched; None if absent."""
    start = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if start < 0:
        return None
    i = text.find("{", start)
    if i < 0:
        # MATH has a few "\boxed 5" without braces
        tail = text[start + len("\\boxed"):].strip()
        return tail.split("$")[0].strip() or None
    depth = 0
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i + 1 : j].strip()
    return None


# ---------------------------------------------------------------------------------------------
# Terms
# ---------------------------------------------------------------------------------------------
def is_correct(completion: str, gold: str, number_pattern: str = LAST_INTEGER) -> bool:
    """Lenient correctness: the whole completion, its last `<answer>` block or its last number
    matches the gold under math-verify."""
    gold_parsed = _parse_gold(gold)
    candidates = (completion, answer_block(completion), last_number(completion, number_pattern))
    return any(_verify(gold_parsed, c, _LENIENT_EXTRACTION) for c in candidates)


def latex_accuracy(completion: str, gold: str) -> float:
    """open-r1's accuracy term: 1.0 when a LaTeX answer in the completion equals the gold."""
    return float(_verify(_parse_gold(gold), completion, _R1_EXTRACTION))


def format_score(completion: str) -> float:
    """0.1 for a `<think>...</think><answer>...</answer>` span, minus 0.001 per character outside it."""
    match = _LOOSE_FORMAT.search(completion)
    if match is None:
        return 0.0
    return max(0.0, 0.1 - 0.001 * (len(completion) - len(match.group(0))))


def xml_count(completion: str) -> float:
    """0.025 for each of the four tags that appears exactly once."""
    return 0.025 * sum(completion.count(tag) == 1 for tag in ("<think>", "</think>", "<answer>", "</answer>"))


def strict_format(completion: str) -> bool:
    """The evaluation's `for_acc`: the whole output is `<think>...</think><answer>...</answer>`."""
    return _STRICT_FORMAT.match(completion) is not None


def r1_format(completion: str) -> float:
    """open-r1's format_reward: 1.0 for exactly `<think>\\n...\\n</think>\\n<answer>\\n...\\n</answer>`."""
    return 1.0 if _R1_FORMAT.match(completion) else 0.0


def r1_tag_count(completion: str) -> float:
    """open-r1's tag_count_reward: 0.25 for each newline-delimited tag that appears exactly once."""
    tags = ("<think>\n", "\n</think>\n", "\n<answer>\n", "\n</answer>")
    return 0.25 * sum(completion.count(tag) == 1 for tag in tags)


# ---------------------------------------------------------------------------------------------
# Rewards of each setting: fn(completion, gold) -> float
# ---------------------------------------------------------------------------------------------
def gsm8k_reward(completion: str, gold: str) -> float:
    if is_correct(completion, gold):
        return 1.0
    return format_score(completion) + xml_count(completion)


def binary_reward(completion: str, gold: str) -> float:
    return 1.0 if is_correct(completion, gold) else 0.0


def llama_reward(completion: str, gold: str) -> float:
    return float(is_correct(completion, gold, LAST_NUMBER)) + format_score(completion) + xml_count(completion)


def open_r1_reward(completion: str, gold: str) -> float:
    return latex_accuracy(completion, gold) + r1_format(completion) + r1_tag_count(completion)


REWARDS: Registry[Callable[[str, str], float]] = Registry("reward", {
    "gsm8k": gsm8k_reward,
    "binary": binary_reward,
    "llama": llama_reward,
    "open_r1": open_r1_reward,
})


# Evaluation metrics, each in {0, 1} per completion (docs/paper.md 2.1.8 and 2.2).
def ans_acc(completion: str, gold: str) -> float:
    return float(is_correct(completion, gold))


def both_acc(completion: str, gold: str) -> float:
    return float(strict_format(completion) and is_correct(completion, gold))


METRICS: Registry[Callable[[str, str], float]] = Registry("metric", {
    "ans_acc": ans_acc,
    "for_acc": lambda completion, gold: float(strict_format(completion)),
    "both_acc": both_acc,
    "latex_accuracy": latex_accuracy,
})


def get_reward(name: str) -> Callable[[str, str], float]:
    return REWARDS[name]


def get_metric(name: str) -> Callable[[str, str], float]:
    return METRICS[name]
