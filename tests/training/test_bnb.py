"""The `l40s-lora` recipe with the real bitsandbytes on CPU (bitsandbytes >= 0.50 runs there).

The recipe (config/hardware/l40s-lora.yaml, pods/training/update/lora.py): the base reloaded in 4-bit
NF4 (double-quantised, bf16 compute) under a peft LoRA adapter of rank 64 on every projection,
bitsandbytes' 8-bit AdamW, bf16, gradient checkpointing, the reference being the same model with
the adapter disabled. On a CPU the rollouts come from the `hf` engine instead of vLLM (that one is
tested in its own environment, tests/training/test_vllm_engine.py).

`test_which_bitsandbytes_kernels_ran` prints which bitsandbytes operations ran on a CPU kernel of
bitsandbytes and which on its generic torch fallback (run pytest with -s to see it).
"""
import collections
import json
import math

import pytest
import torch
import yaml

bnb = pytest.importorskip("bitsandbytes", reason="bitsandbytes is not installed (it is in the dev extra)")

from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from pods.training.config import TrainConfig  # noqa: E402
from pods.training.models import build_char_tokenizer, build_tiny_policy  # noqa: E402
from pods.training.update.base import UpdateBatch  # noqa: E402
from pods.training.update.lora import LoraUpdateEngine  # noqa: E402

pytestmark = pytest.mark.bnb
REPO_RECIPE = "config/hardware/l40s-lora.yaml"
# NF4 keeps 4 bits per weight: the 4-bit policy's log-probs differ from the full-precision
# base's by a few hundredths of a nat on this model (measured 0.03)
NF4_ATOL = 0.2
# bitsandbytes keeps optimiser states of tensors smaller than this in 32 bits (its min_8bit_size)
MIN_8BIT_SIZE = 4096
CPU_OVERRIDES = dict(device="cpu", rollout_engine="hf", num_threads=1)


def recipe(**extra) -> dict:
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / REPO_RECIPE
    return {**yaml.safe_load(path.read_text())["train"], **CPU_OVERRIDES, **extra}


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A small Llama and the embedded tokenizer on disk: load_in_4bit reloads the base from there."""
    folder = tmp_path_factory.mktemp("bnb-base")
    tokenizer = build_char_tokenizer()
    build_tiny_policy(tokenizer, arch="llama", n_layer=2, d_model=128, n_head=4, max_len=128).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def engine_config(base, **extra) -> TrainConfig:
    cfg = TrainConfig(base_model=str(base), lr=1e-3, beta=0.04, update_engine="lora")
    for key, value in recipe(**extra).items():
        setattr(cfg, key, value)
    return cfg


def make_batch(seed: int, rows: int = 8, prompt: int = 6, completion: int = 8) -> UpdateBatch:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(4, 90, (rows, prompt + completion), generator=g)
    attention = torch.ones_like(ids)
    completion_mask = torch.ones(rows, completion, dtype=torch.long)
    for i in range(rows):
        attention[i, : i % 3] = 0
        completion_mask[i, completion - i % 4:] = 0
        attention[i, prompt + completion - i % 4:] = 0
    return UpdateBatch(ids, attention, completion_mask)


class BnbOps(TorchDispatchMode):
    """Counts the bitsandbytes operations that run inside the `with` block."""

    def __init__(self):
        super().__init__()
        self.calls = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.namespace == "bitsandbytes":
            self.calls[func.name().split("::")[1]] += 1
        return func(*args, **(kwargs or {}))


def implementation(op: str) -> str:
    """Where bitsandbytes sends `op` for CPU tensors: its CPU kernel, or its generic torch code."""
    if torch._C._dispatch_has_kernel_for_dispatch_key(f"bitsandbytes::{op}", "CPU"):
        return "bitsandbytes CPU kernel"
    return "generic torch fallback"


def test_4bit_base_lora_adapter_and_8bit_adamw(base):
    from transformers import AutoModelForCausalLM

    full = AutoModelForCausalLM.from_pretrained(base)
    engine = LoraUpdateEngine(model=full, config=engine_config(base))
    modules = dict(engine.policy.named_modules())
    targets = [name for name, m in modules.items() if name.endswith("base_layer")]
    assert len(targets) == 2 * 7  # every attention and MLP projection of both layers
    for name in targets:
        layer = modules[name]
        assert isinstance(layer, bnb.nn.Linear4bit) and layer.weight.quant_state.quant_type == "nf4", name
        assert layer.weight.dtype == torch.uint8 and layer.compute_dtype == torch.bfloat16
    assert all(p.requires_grad == ("lora_" in n) for n, p in engine.policy.named_parameters())
    assert isinstance(engine.optimizer, bnb.optim.AdamW8bit)

    batch = make_batch(0)
    reference = TrainConfig(base_model=str(base))
    from pods.training.update.torch_engine import TorchUpdateEngine

    full_precision = TorchUpdateEngine(model=full, config=reference).logprobs(batch)
    start = engine.logprobs(batch)
    gap = (start - full_precision).abs().max()
    assert 0 < gap < NF4_ATOL  # quantised for real, and still the same model
    assert torch.equal(engine.ref_logprobs(batch), start)  # B = 0: adapter-free reference = policy

    results = [engine.step(make_batch(s), torch.linspace(-1.0, 1.0, 8), ref_logprobs=engine.ref_logprobs(make_batch(s)))
               for s in range(3)]
    assert all(math.isfinite(r["loss"]) and math.isfinite(r["grad_norm"]) for r in results)
    assert results[0]["kl"] == pytest.approx(0.0, abs=1e-7) and results[-1]["kl"] > 0
    assert torch.equal(engine.ref_logprobs(batch), start)  # the 4-bit base never moved
    assert (engine.logprobs(batch) - start).abs().max() > 1e-3  # the adapter did

    states = engine.optimizer.state.values()
    big = [s for p, s in engine.optimizer.state.items() if p.numel() >= MIN_8BIT_SIZE]
    assert big and all(s["state1"].dtype == torch.uint8 and s["state2"].dtype == torch.uint8 for s in big)
    assert all(s["state1"].dtype == torch.float32 for p,
               s in engine.optimizer.state.items() if p.numel() < MIN_8BIT_SIZE)
    assert len(states) == sum(p.requires_grad for p in engine.policy.parameters())

    # resume: adapter and 8-bit optimiser states into a fresh engine, then one more step in both
    state = engine.state_dict()
    assert all("lora_" in k for k in state["adapter"])
    assert torch.equal(engine.ref_logprobs(batch), start)  # saving leaves the base's (CPU-packed) layout alone
    fresh = LoraUpdateEngine(model=AutoModelForCausalLM.from_pretrained(base), config=engine_config(base))
    fresh.load_state_dict(state)
    assert torch.equal(fresh.logprobs(batch), engine.logprobs(batch))
    nxt = make_batch(7)
    a = engine.step(nxt, torch.linspace(-1.0, 1.0, 8), ref_logprobs=engine.ref_logprobs(nxt))
    b = fresh.step(nxt, torch.linspace(-1.0, 1.0, 8), ref_logprobs=fresh.ref_logprobs(nxt))
    assert a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-6)
    assert torch.equal(fresh.logprobs(batch), engine.logprobs(batch))


@pytest.mark.slow
def test_l40s_lora_recipe_trains_a_few_steps_on_cpu(base, tmp_path):
    from pods.training.trainer import train

    cfg = TrainConfig(
        benchmark="arith", base_model=str(base), n=8, m=4, rule="max_variance", beta=0.04, max_new_tokens=16,
        max_steps=3, max_train_time_s=None, eval_every_s=None, eval_items=8, checkpoint_every_s=0,
        run_dir=str(tmp_path / "run"), **recipe(micro_batch=4),
    ).validate()
    assert (cfg.load_in_4bit, cfg.optimizer, cfg.precision, cfg.lora_rank) == (True, "adamw_8bit", "bf16", 64)
    summary = train(cfg, progress_bar=False)
    steps = [json.loads(line) for line in (tmp_path / "run/steps.jsonl").read_text().splitlines()]
    assert summary["status"] == "complete" and [s["step"] for s in steps] == [1, 2, 3]
    assert all(math.isfinite(s["loss"]) and math.isfinite(s["kl"]) and s["rollouts_trained"] == 4 for s in steps)
    # the adapter-free reference pass ran every step (beta > 0); an untrained base earns equal
    # rewards, so the adapter may not move here: test_4bit_base_lora_adapter_and_8bit_adamw shows it
    assert all(s["logprob_s"] > 0 for s in steps)
    import pods.training.checkpoint as ckpt

    checkpoint = ckpt.load(tmp_path / "run/checkpoint", ckpt.read_manifest(tmp_path / "run/checkpoint"))["engine"]
    assert checkpoint.keys() == {"adapter", "optimizer", "scheduler"}  # the 4-bit base is not saved
    # bitsandbytes' state_dict keeps each parameter's states under one key of its own
    saved = [s.get("__bnb_optimizer_quant_state__", s) for s in checkpoint["optimizer"]["state"].values()]
    assert torch.uint8 in {s["state1"].dtype for s in saved}  # 8-bit moments in the checkpoint too


def test_which_bitsandbytes_kernels_ran(base, capsys):
    from transformers import AutoModelForCausalLM

    with BnbOps() as load:
        engine = LoraUpdateEngine(model=AutoModelForCausalLM.from_pretrained(base), config=engine_config(base))
    batch = make_batch(0)
    with BnbOps() as step:
        engine.step(batch, torch.linspace(-1.0, 1.0, 8), ref_logprobs=engine.ref_logprobs(batch))
    with BnbOps() as decode, torch.no_grad():
        engine.policy.generate(input_ids=batch.input_ids[:2, -4:], max_new_tokens=4, do_sample=False)
    ran = {"load (4-bit quantisation)": load.calls, "update step": step.calls, "decoding": decode.calls}
    # the recipe's pieces all ran through bitsandbytes
    # (on a CPU with AVX512-BF16 the no-grad reference forward packs the weights for its CPU kernel,
    # and the update's matmuls then run as gemv_4bit on that layout)
    assert load.calls["quantize_4bit"] and step.calls["optimizer_update_8bit_blockwise"]
    assert step.calls["gemm_4bit"] or step.calls["gemv_4bit"]
    assert decode.calls["gemm_4bit"] or decode.calls["gemv_4bit"]
    from bitsandbytes.functional import has_avx512bf16

    with capsys.disabled():
        print(f"\nbitsandbytes {bnb.__version__} on CPU ({torch.backends.cpu.get_cpu_capability()}, "
              f"AVX512-BF16: {bool(has_avx512bf16())}): operations of the l40s-lora recipe")
        for phase, calls in ran.items():
            for op, count in sorted(calls.items()):
                print(f"  {phase:<26} {op:<34} x{count:<4} {implementation(op)}")
