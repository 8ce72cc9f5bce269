"""The `lora` update engine on a tiny Qwen2 model built from a config (CPU, no download)."""
import dataclasses
import importlib.util

import pytest
import torch

from pods.training.config import TrainConfig
from pods.training.update.base import UpdateBatch
from pods.training.update.lora import LoraOptions, LoraUpdateEngine
from pods.training.update.torch_engine import TorchUpdateEngine
from tiny_models import tiny_lm

VOCAB = 48


def tiny_qwen2(seed: int = 0):
    return tiny_lm("qwen2", VOCAB, kv_heads=2, seed=seed)


def make_batch(rows: int = 8, prompt: int = 6, completion: int = 7, seed: int = 0) -> UpdateBatch:
    """Left-padded prompts of varied length, completions that end at varied points."""
    g = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(1, VOCAB, (rows, prompt + completion), generator=g)
    attention = torch.ones_like(input_ids)
    completion_mask = torch.ones(rows, completion, dtype=torch.long)
    for i in range(rows):
        pad = i % 3
        attention[i, :pad] = 0
        input_ids[i, :pad] = 0
        end = completion - (i % 4)
        completion_mask[i, end:] = 0
        attention[i, prompt + end:] = 0
        input_ids[i, prompt + end:] = 0
    return UpdateBatch(input_ids=input_ids, attention_mask=attention, completion_mask=completion_mask)


def train_config(**extra) -> TrainConfig:
    # engine options are TrainConfig fields like any other (not validated here: the engine checks them)
    return TrainConfig(lr=1e-2, micro_batch=4, max_grad_norm=0.0, weight_decay=0.0, **extra)


def lora_config(**extra) -> TrainConfig:
    return train_config(lora_rank=4, lora_alpha=8, lora_target_modules="q_proj,v_proj,up_proj", **extra)


def test_adapter_starts_as_the_base_and_trains_alone():
    torch.set_num_threads(1)
    batch, adv = make_batch(), torch.linspace(-1.0, 1.0, 8)
    base = TorchUpdateEngine(model=tiny_qwen2(), config=train_config())
    lora = LoraUpdateEngine(model=tiny_qwen2(), config=lora_config())
    start = lora.logprobs(batch)
    # B = 0 at initialisation: same log-probs as the plain model, and the reference is the base
    assert torch.allclose(start, base.logprobs(batch), atol=1e-6)
    assert torch.equal(lora.ref_logprobs(batch), start)
    # the first step's loss equals the full model's (same outputs, same loss)
    frozen = {k: v.clone() for k, v in lora.policy.named_parameters() if "lora_" not in k}
    out_lora, out_base = lora.step(batch, adv), base.step(batch, adv)
    assert out_lora["loss"] == pytest.approx(out_base["loss"], rel=1e-5)
    # only adapter weights moved; the policy changed; the reference did not
    for name, param in lora.policy.named_parameters():
        if "lora_" not in name:
            assert torch.equal(param, frozen[name]), name
    assert not torch.allclose(lora.logprobs(batch), start, atol=1e-4)
    assert torch.allclose(lora.ref_logprobs(batch), start, atol=1e-6)
    trainable = sum(p.numel() for p in lora.policy.parameters() if p.requires_grad)
    assert 0 < trainable < sum(p.numel() for p in lora.policy.parameters()) / 4


def test_micro_batching_gives_the_whole_batch_update():
    # advantages that do not sum to zero, so that the loss is not a rounding error around 0 (the
    # micro-batches, grouped by completion length, sum it in another order)
    batch, adv = make_batch(), torch.linspace(-0.5, 1.0, 8)
    one = LoraUpdateEngine(model=tiny_qwen2(), config=lora_config())
    one.cfg.micro_batch = 8
    four = LoraUpdateEngine(model=tiny_qwen2(), config=lora_config())
    four.cfg.micro_batch = 2
    a, b = one.step(batch, adv), four.step(batch, adv)
    assert abs(a["loss"]) > 1e-3 and a["loss"] == pytest.approx(b["loss"], rel=1e-5)
    assert torch.allclose(one.logprobs(batch), four.logprobs(batch), atol=1e-5)


def test_kl_against_the_adapter_free_base():
    cfg = lora_config(beta=0.04)
    lora = LoraUpdateEngine(model=tiny_qwen2(), config=cfg)
    batch, adv = make_batch(), torch.linspace(-1.0, 1.0, 8)
    first = lora.step(batch, adv, ref_logprobs=lora.ref_logprobs(batch))
    second = lora.step(batch, adv, ref_logprobs=lora.ref_logprobs(batch))
    assert first["kl"] == pytest.approx(0.0, abs=1e-7)  # policy == reference before any update
    assert second["kl"] > 1e-7


def test_checkpoint_holds_the_adapter_only_and_resumes_exactly(tmp_path):
    import pods.training.checkpoint as ckpt

    batch, adv = make_batch(), torch.linspace(-1.0, 1.0, 8)
    a = LoraUpdateEngine(model=tiny_qwen2(), config=lora_config())
    a.step(batch, adv)
    ckpt.save(tmp_path, a.state_dict())  # through the checkpoint files: no tensor is shared with `a`
    state = ckpt.load(tmp_path, ckpt.read_manifest(tmp_path))
    assert state["adapter"] and all("lora_" in k for k in state["adapter"])
    b = LoraUpdateEngine(model=tiny_qwen2(), config=lora_config())
    b.load_state_dict(state)
    assert torch.allclose(a.logprobs(batch), b.logprobs(batch), atol=1e-6)
    batch2 = make_batch(seed=1)
    a.step(batch2, adv)
    b.step(batch2, adv)  # the optimiser moments came back too
    assert torch.allclose(a.logprobs(batch), b.logprobs(batch), atol=1e-6)


def test_options_and_bad_input():
    opts = LoraOptions.from_config(lora_config())
    assert (opts.lora_rank, opts.lora_alpha, opts.target_modules) == (4, 8, ["q_proj", "v_proj", "up_proj"])
    paper = LoraOptions.from_config(TrainConfig())  # TrainConfig's defaults are the paper's recipe
    assert (paper.lora_rank, paper.lora_alpha) == (64, 64) and len(paper.target_modules) == 7
    with pytest.raises(ValueError, match="lora_rank"):
        LoraOptions.from_config(train_config(lora_rank=0))
    with pytest.raises(ValueError, match="optimizer"):
        LoraOptions.from_config(train_config(optimizer="sgd"))
    if importlib.util.find_spec("bitsandbytes") is None:
        with pytest.raises(ValueError, match="bitsandbytes"):
            LoraOptions.from_config(train_config(optimizer="adamw_8bit"))
        with pytest.raises(ValueError, match="bitsandbytes"):
            LoraUpdateEngine(model=tiny_qwen2(), config=lora_config(load_in_4bit=True))
    # every option is a TrainConfig field, with that field's default and help (stated there only)
    fields = {f.name: f for f in dataclasses.fields(TrainConfig)}
    for f in dataclasses.fields(LoraOptions):
        assert (f.default, dict(f.metadata)) == (fields[f.name].default, dict(fields[f.name].metadata)), f.name
        assert f.metadata.get("help"), f.name
