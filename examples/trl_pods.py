"""A few PODS steps in TRL: GRPOTrainer's usage, with PODSGRPOTrainer and two more config fields.

    pip install "torch==<your torch>" -e ".[trl]" && python examples/trl_pods.py

A tiny untrained model built from a config stands in for yours (no download): swap in any causal LM.
"""
import logging
import os
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
# TRL imports peft, which imports bitsandbytes, which warns that it found no fused 4-bit CPU kernel;
# this example has no 4-bit weights
logging.getLogger("bitsandbytes.backends.cpu.ops").setLevel(logging.ERROR)

from datasets import Dataset  # noqa: E402

from pods.integrations.trl import PODSGRPOConfig, PODSGRPOTrainer  # noqa: E402
from pods.training.models import build_char_tokenizer, build_tiny_policy  # noqa: E402

tokenizer = build_char_tokenizer()
# or AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B-Instruct")
model = build_tiny_policy(tokenizer, n_layer=2, d_model=64)

pairs = [(a, b) for a in range(10) for b in range(10)]
dataset = Dataset.from_dict({"prompt": [f"{a}+{b}=" for a, b in pairs], "answer": [str(a + b) for a, b in pairs]})


def correct(completions, answer, **kwargs):
    return [1.0 if c.startswith(a) else 0.0 for c, a in zip(completions, answer)]


def digits(completions, **kwargs):  # shaping: a little for answering in digits at all
    return [0.1 * sum(ch.isdigit() for ch in c[:2]) for c in completions]


args = PODSGRPOConfig(
    output_dir=tempfile.mkdtemp(),
    num_generations=16,  # completions generated per prompt (n)
    num_kept_generations=4,  # PODS: completions per prompt the update trains on (m)
    selection_rule="max_variance",  # PODS: which m (pods.selection)
    per_device_train_batch_size=64,  # counts generated completions: 4 prompts, 16 trained per micro-step
    max_completion_length=4,
    learning_rate=1e-3,
    max_steps=5,
    logging_steps=1,
    use_cpu=True,
    bf16=False,
    report_to="none",
    save_strategy="no",
)
trainer = PODSGRPOTrainer(
    model=model, reward_funcs=[correct, digits], args=args, train_dataset=dataset, processing_class=tokenizer
)
trainer.train()

for log in trainer.state.log_history[:-1]:
    print(f"step {log['step']}: mean reward of the 16 generated {log['pods/generated_reward_mean']:.3f}, "
          f"of the 4 kept {log['reward']:.3f}, gradient norm {log['grad_norm']:.3f}")
