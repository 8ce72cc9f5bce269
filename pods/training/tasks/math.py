"""MATH (training) and the paper's evaluation sets MATH-500 and AMC23, through `datasets`.

Every benchmark here reads a hub dataset by default and takes `source=<local path>` for offline
machines: a snapshot of the hub repository (`huggingface-cli download --repo-type dataset ...`),
a folder of `<split>*.parquet|jsonl|json|csv` files (per config sub-folder where the dataset has
configs), a `save_to_disk` folder, or a single data file for the split.

Prompts are the paper's chat prompts (`rewards.SYSTEM_PROMPT` as the system turn, the raw question
as the user turn). As in the paper, prompts longer than `max_prompt_tokens` tokens under
`filter_tokenizer` are dropped (the authors filtered with Qwen2.5's tokenizer to <= 512 tokens:
MATH-500 then keeps 496 of 500 problems, GSM8K test all 1319, AMC23 all 40).
"""
from __future__ import annotations

import random
from pathlib import Path
from typing import Iterable

from pods.training.tasks.base import Problem, Task
from pods.training.tasks.rewards import SYSTEM_PROMPT, get_metric, get_reward, last_boxed

MATH_SUBSETS = (
    "algebra", "counting_and_probability", "geometry", "intermediate_algebra",
    "number_theory", "prealgebra", "precalculus",
)
_FILE_BUILDERS = {".parquet": "parquet", ".jsonl": "json", ".json": "json", ".csv": "csv"}


# -------------------------------------------------------------------------------------- loading
def load_split(source: str, config: str | None, split: str):
    """One split of a dataset as a `datasets.Dataset`, from the hub or from a local path."""
    import datasets

    path = Path(source).expanduser()
    if path.is_file():
        if path.suffix not in _FILE_BUILDERS:
            raise ValueError(f"dataset file {source}: expected one of {sorted(_FILE_BUILDERS)}")
        return datasets.load_dataset(_FILE_BUILDERS[path.suffix], data_files=str(path), split="train")
    if path.is_dir():
        if (path / "dataset_dict.json").exists():  # save_to_disk of a DatasetDict
            saved = datasets.load_from_disk(str(path))
            if split not in saved:
                raise ValueError(f"dataset folder {source}: no split {split!r} (has {sorted(saved)})")
            return saved[split]
        folder = path / config if config and (path / config).is_dir() else path
        files = sorted(
            f for f in folder.rglob(f"{split}*") if f.suffix in _FILE_BUILDERS and f.is_file()
        )
        if not files:
            raise ValueError(
                f"dataset folder {folder}: no {split}*.parquet/.jsonl/.json/.csv file for split {split!r}"
            )
        builders = {_FILE_BUILDERS[f.suffix] for f in files}
        if len(builders) > 1:
            raise ValueError(f"dataset folder {folder}: mixed file types for split {split!r}: {files}")
        return datasets.load_dataset(builders.pop(), data_files=[str(f) for f in files], split="train")
    if source.startswith((".", "/", "~")):
        raise ValueError(f"dataset path {source} does not exist")
    try:
        return datasets.load_dataset(source, config, split=split)
    except Exception as exc:  # offline, or a wrong id: say which dataset and how to fix it
        raise ValueError(
            f"cannot load dataset {source!r} (config {config!r}, split {split!r}): {exc.__class__.__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else ''}. On an offline machine pass a local copy as "
            f"the task's `source`."
        ) from exc


def _load_tokenizer(tokenizer):
    if tokenizer is None or not isinstance(tokenizer, (str, Path)):
        return tokenizer
    from transformers import AutoTokenizer

    from pods.training import hub

    return AutoTokenizer.from_pretrained(hub.resolve(str(tokenizer)) if hub.is_hub_id(tokenizer) else str(tokenizer))


def chat_prompt(question: str, tokenizer, system_prompt: str | None = SYSTEM_PROMPT) -> str:
    """`question` as the user turn of the tokenizer's chat template, ready for the assistant."""
    if getattr(tokenizer, "chat_template", None) is None:
        raise ValueError(
            f"tokenizer {getattr(tokenizer, 'name_or_path', type(tokenizer).__name__)!r} has no chat "
            "template; the paper's benchmarks need an instruct model's tokenizer"
        )
    messages = [{"role": "user", "content": question}]
    if system_prompt is not None:
        messages.insert(0, {"role": "system", "content": system_prompt})
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


# ---------------------------------------------------------------------------------------- tasks
class HubMathTask(Task):
    """A math benchmark read with `datasets`, graded by the functions of `pods.training.tasks.rewards`.

    Subclasses say where the data lives and how a row becomes a `Problem` (`_rows`).

    Args:
        source: hub id (default: the paper's) or a local path, see the module docstring.
        test_source: where the test split comes from when not from `source` (required when
            `source` is a single file and the task has a train and a test split).
        reward: training reward, a `rewards.REWARDS` name (`gsm8k`, `binary`, `llama`, `open_r1`).
        metric: accuracy metric, a `rewards.METRICS` name (`ans_acc`; `both_acc` for the Llama runs;
            `latex_accuracy` for the 8-GPU runs).
        filter_tokenizer: tokenizer (or its hub id / local folder) whose chat template measures
            prompt length for the filter; None keeps every prompt.
        max_prompt_tokens: the filter's limit (the paper's 512).
        test_size: keep only the first `test_size` test problems (None: all), for quick evaluations.
        system_prompt: system turn of the chat prompt (None: user turn only).
    """

    name: str
    default_source: str
    train_split: str | None = "train"
    test_split: str | None = "test"

    def __init__(
        self,
        source: str | None = None,
        reward: str = "binary",
        metric: str = "ans_acc",
        filter_tokenizer=None,
        max_prompt_tokens: int = 512,
        test_size: int | None = None,
        system_prompt: str | None = SYSTEM_PROMPT,
        test_source: str | None = None,
    ):
        self.source = source or self.default_source
        self.test_source = test_source
        if self.train_split and self.test_split and test_source is None and Path(self.source).expanduser().is_file():
            raise ValueError(f"task {self.name!r}: source {self.source} is one file, but the task reads a "
                             f"{self.train_split} and a {self.test_split} split; give the {self.test_split} "
                             f"split's file as test_source (or a folder of {self.train_split}*/{self.test_split}* "
                             f"files)")
        self.reward_name, self.metric_name = reward, metric
        self._reward, self._metric = get_reward(reward), get_metric(metric)  # fail early on a typo
        if max_prompt_tokens < 1:
            raise ValueError(f"task {self.name!r}: max_prompt_tokens must be >= 1, got {max_prompt_tokens}")
        if test_size is not None and test_size < 1:
            raise ValueError(f"task {self.name!r}: test_size must be >= 1 or None, got {test_size}")
        self.filter_tokenizer = filter_tokenizer
        self.max_prompt_tokens = int(max_prompt_tokens)
        self.test_size = test_size
        self.system_prompt = system_prompt
        self._cache: dict[str, list[Problem]] = {}

    @classmethod
    def hub_datasets(cls, options: dict) -> dict[str, str]:
        from pods.training.hub import is_hub_id

        sources = {"source": options.get("source") or cls.default_source, "test_source": options.get("test_source")}
        return {key: value for key, value in sources.items() if is_hub_id(value)}

    def split_source(self, split: str) -> str:
        return self.test_source if split == self.test_split and self.test_source else self.source

    # ----------------------------------------------------------------------------------- splits
    def _rows(self, split: str) -> Iterable[Problem]:
        raise NotImplementedError

    def _problems(self, split: str | None) -> list[Problem]:
        if split is None:
            raise ValueError(f"benchmark {self.name!r} is an evaluation set: it has no training split")
        if split not in self._cache:
            problems = [p for p in self._rows(split) if p.answer]
            self._cache[split] = self.filter_long(problems)
        return self._cache[split]

    def filter_long(self, problems: list[Problem]) -> list[Problem]:
        """Drop problems whose rendered prompt exceeds `max_prompt_tokens` under `filter_tokenizer`."""
        if self.filter_tokenizer is None:
            return problems
        self.filter_tokenizer = _load_tokenizer(self.filter_tokenizer)
        prompts = [self.render_prompt(p, self.filter_tokenizer) for p in problems]
        lengths = [len(ids) for ids in self.filter_tokenizer(prompts, add_special_tokens=False)["input_ids"]]
        return [p for p, length in zip(problems, lengths) if length <= self.max_prompt_tokens]

    def train_problems(self, seed: int) -> list[Problem]:
        problems = list(self._problems(self.train_split))
        if self.test_split:  # the question-level check the embedded tasks make by construction
            test = {p.question for p in self._problems(self.test_split)}
            overlap = [p for p in problems if p.question in test]
            if overlap:
                raise ValueError(
                    f"task {self.name!r}: {len(overlap)} training problem(s) are also test questions "
                    f"({self.split_source(self.train_split)} / {self.split_source(self.test_split)}), e.g. "
                    f"{overlap[0].question[:60]!r}; the train and test splits must not overlap")
        random.Random(seed).shuffle(problems)
        return problems

    def test_problems(self) -> list[Problem]:
        problems = self._problems(self.test_split)
        return problems if self.test_size is None else problems[: self.test_size]

    # ---------------------------------------------------------------------------------- grading
    def render_prompt(self, problem: Problem, tokenizer) -> str:
        return chat_prompt(problem.question, tokenizer, self.system_prompt)

    def reward(self, completion: str, problem: Problem) -> float:
        return self._reward(completion, problem.answer)

    def is_correct(self, completion: str, problem: Problem) -> bool:
        return self._metric(completion, problem.answer) > 0.0


class MathTrain(HubMathTask):
    """MATH (hendrycks), all 7 subsets of the train split; gold = the solution's last `\\boxed{}`.

    Its test set is MATH-500, as in the paper (the MATH runs are evaluated on MATH-500). The
    default reward is binary ("MATH-NF": no format terms).
    """

    name = "math"
    default_source = "EleutherAI/hendrycks_math"

    def __init__(self, *args, test_source: str | None = None, **kwargs):
        super().__init__(*args, test_source=test_source or Math500.default_source, **kwargs)

    @classmethod
    def hub_datasets(cls, options: dict) -> dict[str, str]:
        return super().hub_datasets({**options, "test_source": options.get("test_source") or Math500.default_source})

    def _subsets(self) -> list[str | None]:
        """The hub repository and a snapshot of it keep one folder (config) per subject; a single
        file, a flat folder or a `save_to_disk` folder holds them all and is read once."""
        path = Path(self.source).expanduser()
        if not path.exists():
            return list(MATH_SUBSETS)
        present = [s for s in MATH_SUBSETS if (path / s).is_dir()]
        return present if path.is_dir() and present else [None]

    def _rows(self, split: str) -> Iterable[Problem]:
        if split == "test":
            yield from Math500._math500_rows(self.test_source)
            return
        for subset in self._subsets():
            for i, row in enumerate(load_split(self.source, subset, split)):
                yield Problem(
                    row["problem"], last_boxed(row["solution"]) or "",
                    {"source": f"{subset or row.get('type', '')}/{split}/{i}", "level": row.get("level"),
                     "type": row.get("type")},
                )


class Math500(HubMathTask):
    """MATH-500 (HuggingFaceH4), the paper's MATH evaluation set (496 problems after the filter)."""

    name = "math500"
    default_source = "HuggingFaceH4/MATH-500"
    train_split = None

    @staticmethod
    def _math500_rows(source: str) -> Iterable[Problem]:
        for i, row in enumerate(load_split(source, None, "test")):
            yield Problem(row["problem"], str(row["answer"]).strip(),
                          {"source": row.get("unique_id", f"test/{i}"), "level": row.get("level")})

    def _rows(self, split: str) -> Iterable[Problem]:
        return self._math500_rows(self.source)


class AMC23(HubMathTask):
    """AMC 2023 (zwhe99/amc23), 40 problems with integer answers stored as floats."""

    name = "amc23"
    default_source = "zwhe99/amc23"
    train_split = None

    def _rows(self, split: str) -> Iterable[Problem]:
        for i, row in enumerate(load_split(self.source, None, "test")):
            answer = row["answer"]
            if isinstance(answer, float) and answer.is_integer():
                answer = int(answer)  # 27.0 -> "27", as the authors did
            yield Problem(row["question"], str(answer).strip(), {"source": f"test/{row.get('id', i)}"})
