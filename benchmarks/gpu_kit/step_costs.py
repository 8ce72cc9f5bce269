"""Seconds per step by phase of GRPO n=16, PODS 64->16 and GRPO-GA n=64 at the paper's sizes.

    python benchmarks/gpu_kit/step_costs.py --out costs.json --hardware h200 [--engine lora]
    python benchmarks/gpu_kit/step_costs.py --arch tiny --device cpu --steps 1   # the CPU dry run
    python benchmarks/gpu_kit/step_costs.py --rollout-engine hf_static ...        # compiled decoding

The model is built from Qwen2.5-3B's architecture with random weights (no download) in bf16, and
driven through this package's own engines: `hf` rollouts (eager; `--rollout-engine hf_static`:
static KV cache and a compiled, CUDA-graph-captured decode step), then the `lora` update engine (the
paper's single-GPU recipe: rank 64, alpha 64, the seven projections; a bf16 base here, not 4-bit)
or the `torch` engine (full fine-tuning, as in the 8-GPU setting, on one device). Shapes are the
single-GPU setting's (docs/paper.md 2.1): one prompt per step, completions of exactly 512 tokens
(the EOS id is set to one the model cannot emit, so random weights do not change the work and
every arm decodes the same length), beta = 0.04 (the reference pass runs), micro-batch 16.
Rewards are Bernoulli(0.5) draws: with random weights no completion is right, and the step's cost
does not depend on the values. Every phase is timed with the device synchronised at its ends.

It imports only what the GPU image has (torch, transformers, peft): no task, no dataset.
`--out` writes the phase-cost file that `pods project --costs` reads.
"""
from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout, whether or not pods is installed

from cost_report import report  # noqa: E402  (beside this script)

from pods.grpo import kept_advantages  # noqa: E402
from pods.selection import select  # noqa: E402
from pods.training.batches import UpdateBatch  # noqa: E402
from pods.training.config import TrainConfig  # noqa: E402
from pods.training.rollout import rollout_engine_class  # noqa: E402

ARMS = {"GRPO n=16": (16, 16), "PODS n=64->16": (64, 16), "GRPO-GA n=64": (64, 64)}
from pods.vocabulary import STEP_PHASES as PHASES  # noqa: E402
from pods.vocabulary import method_for  # noqa: E402

# Qwen2.5-3B-Instruct's config.json (architecture only); `tiny` keeps its shape at toy size for CPU
ARCHS = {
    "qwen2.5-3b": dict(hidden_size=2048, intermediate_size=11008, num_hidden_layers=36, num_attention_heads=16,
                       num_key_value_heads=2, vocab_size=151936, max_position_embeddings=32768,
                       rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True),
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=512, max_position_embeddings=2048, tie_word_embeddings=True),
}


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arch", choices=sorted(ARCHS), default="qwen2.5-3b")
    p.add_argument("--device", default="cuda")
    p.add_argument("--engine", choices=("lora", "torch"), default="lora")
    p.add_argument("--rollout-engine", choices=("hf", "hf_static"), default="hf")
    p.add_argument("--prompt-tokens", type=int, default=200, help="prompt length (a GSM8K question in its template)")
    p.add_argument("--completion-tokens", type=int, default=512)
    p.add_argument("--micro-batch", type=int, default=16)
    p.add_argument("--steps", type=int, default=3, help="timed steps per arm (after one untimed)")
    p.add_argument("--out", default=None)
    p.add_argument("--hardware", default=platform.node())
    return p.parse_args()


def build(args):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    dtype = torch.bfloat16 if args.device.startswith("cuda") else torch.float32
    torch.manual_seed(0)
    with torch.device(args.device):
        model = Qwen2ForCausalLM(Qwen2Config(**ARCHS[args.arch], torch_dtype=dtype)).to(dtype)
    return model


def train_config(args, n: int, m: int) -> TrainConfig:
    cfg = TrainConfig(
        benchmark="arith", device=args.device, precision="bf16" if args.device.startswith("cuda") else "fp32",
        update_engine=args.engine, rollout_engine=args.rollout_engine, n=n, m=m,
        rule=method_for(n, m, "max_variance").rule,
        prompts_per_step=1, micro_batch=args.micro_batch, max_new_tokens=args.completion_tokens, temperature=0.9,
        beta=0.04, lr=5e-6, load_in_4bit=False, lora_rank=64, lora_alpha=64, gradient_checkpointing=True,
    )
    return cfg


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def run_arm(args, model, n: int, m: int) -> list[dict[str, float]]:
    from pods.training.update import make_update_engine

    cfg = train_config(args, n, m)
    updater = make_update_engine(args.engine, model=model, config=cfg)
    # pad 0; an EOS id no model emits: every completion runs to exactly --completion-tokens
    sampler = rollout_engine_class(args.rollout_engine)(
        model=updater.policy, tokenizer=SimpleNamespace(pad_token_id=0, eos_token_id=-1), config=cfg)
    gen = torch.Generator().manual_seed(0)
    prompt = torch.randint(1, ARCHS[args.arch]["vocab_size"], (args.prompt_tokens,), generator=gen).tolist()
    steps = []
    for step in range(args.steps + 1):
        times, t0 = {}, time.perf_counter()

        def lap(name):
            nonlocal t0
            sync(args.device)
            now = time.perf_counter()
            times[name] = now - t0
            t0 = now

        sampler.sync_weights(updater.policy)
        rollouts = sampler.generate([prompt], n, temperature=cfg.temperature, max_new_tokens=cfg.max_new_tokens)
        lap("generate")
        rewards = (torch.rand(1, n, generator=gen) < 0.5).double()
        lap("reward")
        kept = select(rewards, m, cfg.rule)
        rows = (kept + torch.arange(kept.shape[0])[:, None] * n).flatten()
        batch = UpdateBatch.from_rollouts(rollouts, rows, 0)
        advantages = kept_advantages(rewards, kept).flatten().float()
        lap("select")
        ref = updater.ref_logprobs(batch)
        lap("logprob")
        updater.step(batch, advantages, None, ref)
        lap("update")
        assert rollouts.completion_ids.shape[1] == cfg.max_new_tokens  # the forced length held
        if step:  # the first step warms the kernels up
            steps.append({**times, "step": sum(times.values())})
    del updater, sampler
    if args.device.startswith("cuda"):
        torch.cuda.empty_cache()
    return steps


def main() -> int:
    args = parse_args()
    rows = {}
    for label, (n, m) in ARMS.items():
        model = build(args)  # a fresh base per arm: no adapter or optimiser state carries over
        steps = run_arm(args, model, n, m)
        rows[label] = {key: statistics.mean(s[key] for s in steps) for key in steps[0]}
        print(f"{label}: " + ", ".join(f"{k} {v:.3f} s" for k, v in rows[label].items()), flush=True)
        del model
    print(f"\n{args.arch}, {args.rollout_engine} rollouts, {args.engine} update, 1 prompt/step, {args.prompt_tokens} "
          f"prompt + {args.completion_tokens} completion tokens, micro-batch {args.micro_batch}, {args.steps} timed "
          "steps")
    report(rows, ARMS, PHASES, out=args.out, hardware=args.hardware, device=args.device, settings={
        "arch": args.arch, "weights": "random", "engine": args.engine, "rollout_engine": args.rollout_engine,
        "prompts_per_step": 1, "prompt_tokens": args.prompt_tokens, "completion_tokens": args.completion_tokens,
        "micro_batch": args.micro_batch, "beta": 0.04, "timed_steps": args.steps})
    grpo, pods, ga = (rows[k]["step"] for k in ARMS)
    print(f"step-cost ratio PODS/GRPO: {pods / grpo:.2f}; PODS/GRPO-GA: {pods / ga:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
