"""`pods warmstart`: the supervised phase that turns a random tiny policy into the RL base model.

The embedded default has no pretrained model to start from, so the package makes one: a short
supervised run on worked examples (see `ChainArithmetic.worked_solution`), part of them
deliberately wrong (`error_rate`) so the base model samples the right answer often but not always.
That is the regime RL with verifiable rewards works in on instruct LLMs: sharpen a skill the model
already has, with room to rise (base greedy accuracy of roughly 10-40%).

Output (the workflow's `models/{benchmark}/base`): model + tokenizer via `save_pretrained`, and
`warmstart.json` with the resolved config, steps, seconds, greedy test accuracy and sampled pass@k
at the RL temperature. Deterministic by seed on CPU.
"""
from __future__ import annotations

import json
import math
import os
import random
import shutil
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

import torch
from tqdm.auto import tqdm
from transformers import get_scheduler

from pods.training.config import TrainConfig
from pods.training.evaluation import EvalSet, evaluate
from pods.training.models import build_char_tokenizer, build_tiny_policy, n_params
from pods.training.rollout.hf import HFRolloutEngine
from pods.training.tasks import get_task
from pods.training.warmstart_config import WarmStartConfig


# ------------------------------------------------------------------------------ data
def make_batch(task, problems, tokenizer, rng: random.Random, error_rate: float):
    """Right-padded prompt+completion+eos rows; the loss sees completion tokens (and eos) only."""
    rows, labels = [], []
    for problem in problems:
        prompt = tokenizer(task.render_prompt(problem, tokenizer))["input_ids"]
        target = tokenizer(task.worked_solution(problem, rng, error_rate), add_special_tokens=False)["input_ids"]
        target = target + [tokenizer.eos_token_id]
        rows.append(prompt + target)
        labels.append([-100] * len(prompt) + target)
    width = max(map(len, rows))
    pad = tokenizer.pad_token_id
    input_ids = torch.tensor([r + [pad] * (width - len(r)) for r in rows])
    attention_mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
    label_ids = torch.tensor([lab + [-100] * (width - len(lab)) for lab in labels])
    return input_ids, attention_mask, label_ids


# ------------------------------------------------------------------------------ evaluation
def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c correct (Chen et al., 2021)."""
    if n - c < k:
        return 1.0
    return 1.0 - math.prod((n - c - i) / (n - i) for i in range(k))


def evaluate_base(model, tokenizer, task, cfg: WarmStartConfig) -> dict:
    """Greedy test accuracy exactly as the trainer's step-0 evaluation computes it, and pass@k.

    Both go through the trainer's own `hf` rollout engine and `EvalSet`, so the base accuracy in
    warmstart.json is the number every RL curve starts from.
    """
    # the sampler and cache the committed bases' pass@k were drawn with (docs/embedded-default.md
    # quotes them); greedy decoding gives the same tokens under the trainer's defaults
    engine = HFRolloutEngine(model=model, tokenizer=tokenizer,
                             config=TrainConfig(sampling="multinomial", kv_cache_chunk=1))
    greedy = evaluate(engine, task, tokenizer, EvalSet.build(task, tokenizer, cfg.eval_items), greedy=True,
                      max_new_tokens=cfg.max_new_tokens, batch_size=cfg.eval_batch)

    pass_set = EvalSet.build(task, tokenizer, cfg.pass_items)
    k_max, per_call = cfg.pass_samples, max(1, cfg.eval_batch // cfg.pass_samples)
    correct = []
    for b, start in enumerate(range(0, len(pass_set.problems), per_call)):
        problems = pass_set.problems[start:start + per_call]
        rollouts = engine.generate(pass_set.prompt_ids[start:start + per_call], k_max, temperature=cfg.temperature,
                                   max_new_tokens=cfg.max_new_tokens, seed=cfg.seed * 1_000_003 + b)
        texts = tokenizer.batch_decode(rollouts.completion_ids, skip_special_tokens=True)
        hits = [task.is_correct(t, problems[g]) for t, g in zip(texts, rollouts.group.tolist())]
        correct += [sum(hits[i * k_max:(i + 1) * k_max]) for i in range(len(problems))]
    ks = [2**e for e in range(int(math.log2(k_max)) + 1)]
    return {
        "greedy_accuracy": greedy["accuracy"],
        "greedy_items": greedy["n_items"],
        "greedy_mean_length": greedy["mean_length"],
        "pass_at_k": {str(k): sum(pass_at_k(k_max, c, k) for c in correct) / len(correct) for k in ks},
        "pass_items": len(correct),
        "pass_samples": k_max,
        "pass_temperature": cfg.temperature,
    }


# ------------------------------------------------------------------------------ the run
def warmstart(cfg: WarmStartConfig, *, progress: bool = True) -> dict:
    """Train, evaluate, and write the model folder atomically; returns the warmstart.json record."""
    cfg.validate()
    torch.set_num_threads(cfg.num_threads)
    task = get_task(cfg.benchmark)
    if not hasattr(task, "worked_solution"):
        raise ValueError(f"benchmark {cfg.benchmark!r} has no worked solutions to warm-start on")
    out_dir = Path(cfg.out_dir.format(benchmark=cfg.benchmark, seed=cfg.seed))

    tokenizer = build_char_tokenizer()
    model = build_tiny_policy(tokenizer, arch=cfg.arch, n_layer=cfg.n_layer, d_model=cfg.d_model,
                              n_head=cfg.n_head, max_len=cfg.max_len, seed=cfg.seed)
    train = task.train_problems(cfg.seed)
    rng = random.Random(cfg.seed)
    torch.manual_seed(cfg.seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    # transformers' "cosine" warms up too; "constant" alone would ignore the warmup
    schedule = get_scheduler({"constant": "constant_with_warmup", "cosine": "cosine"}[cfg.lr_schedule], optimizer,
                             num_warmup_steps=cfg.warmup_steps,
                             num_training_steps=cfg.steps)
    print(f"warm start {cfg.benchmark}: {n_params(model) / 1e6:.2f}M-parameter {cfg.arch}, "
          f"{cfg.steps} steps x {cfg.batch_size} worked examples ({cfg.error_rate:.0%} with an error), "
          f"{len(train)} training problems")

    start = time.perf_counter()
    model.train()
    bar = tqdm(range(cfg.steps), desc="warmstart", disable=not progress, mininterval=2.0)
    for step in bar:
        input_ids, attention_mask, labels = make_batch(task, rng.sample(train, cfg.batch_size), tokenizer, rng,
                                                       cfg.error_rate)
        loss = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        if step % 50 == 0:
            bar.set_postfix(loss=f"{loss.item():.3f}")
        if not progress and (step + 1) % max(1, cfg.steps // 10) == 0:
            print(f"step {step + 1}/{cfg.steps} loss {loss.item():.3f} {time.perf_counter() - start:.0f} s", flush=True)
    train_s = time.perf_counter() - start

    start = time.perf_counter()
    metrics = evaluate_base(model, tokenizer, task, cfg)
    record = {
        "benchmark": cfg.benchmark, "seed": cfg.seed, "steps": cfg.steps, "train_s": train_s,
        "eval_s": time.perf_counter() - start, "final_loss": loss.item(), "n_params": n_params(model),
        **metrics, "config": asdict(cfg), "environment": environment(),
    }
    _save(model, tokenizer, record, out_dir)
    print(f"greedy test accuracy {record['greedy_accuracy']:.3f} on {record['greedy_items']} items; "
          f"pass@k at T={cfg.temperature}: "
          + ", ".join(f"@{k} {v:.3f}" for k, v in record["pass_at_k"].items())
          + f"; {train_s:.0f} s training -> {out_dir}")
    return record


def environment() -> dict:
    """What decides the bits of a CPU build besides the code: the training matrix products take
    another kernel path (AVX2, AVX-512, ...) and thread split on another machine, and the long
    constant-rate warm start turns last-bit differences into a different base model."""
    import platform

    import transformers

    return {"torch": torch.__version__, "transformers": transformers.__version__,
            "cpu_capability": torch.backends.cpu.get_cpu_capability(), "torch_threads": torch.get_num_threads(),
            "machine": platform.machine()}


def _save(model, tokenizer, record: dict, out_dir: Path) -> None:
    """Write into a sibling temp folder, then swap it in: a reader never sees half a model."""
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    (tmp / "warmstart.json").write_text(json.dumps(record, indent=2) + "\n")
    if out_dir.exists():
        old = out_dir.with_name(f".{out_dir.name}.old")
        shutil.rmtree(old, ignore_errors=True)
        os.replace(out_dir, old)
        os.replace(tmp, out_dir)
        shutil.rmtree(old)
    else:
        os.replace(tmp, out_dir)
