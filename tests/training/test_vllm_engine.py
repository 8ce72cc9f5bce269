"""The `vllm` rollout engine against the real vLLM, on a CPU (`vllm-cpu`, no stand-in).

The tests marked `vllm` run where vllm imports: the environment that `bash
scripts/vllm_cpu_env.sh` builds (`.venvs/vllm-cpu/bin/python -m pytest -m vllm -s
tests/training/test_vllm_engine.py`, CI's `vllm` stage); elsewhere they are skipped, saying so. They
cover generation with the trainer's sampling settings (n per prompt, seeds, greedy, the length
cap, EOS), the weight push after a full fine-tuning update (vLLM's log-prob of each token it
generated equals the torch policy's to within LOGPROB_ATOL, before and after the update), the
LoRA path (one adapter version per update), what the CPU build does with sleep mode, and a few
PODS steps of the trainer with `rollout_engine: vllm`.

The model is a small Llama (an architecture vLLM supports) built from a config with the
embedded character tokenizer, its EOS embedding scaled up so that about half the completions
stop before the length cap. vLLM holds it in fp32 (`vllm_dtype: float32`), as the policy is, so
that log-probs compare tightly ("auto" would hold an fp32 checkpoint in bf16).

The tests without the marker check what the real package cannot show: the error when vllm is
missing, option validation, and the engine's small helpers.
"""
import importlib
import importlib.util
import json
import os
import subprocess
import sys
import warnings
from types import SimpleNamespace

import pytest
import torch

from pods.training.config import TrainConfig
from pods.training.models import build_char_tokenizer, build_tiny_policy
from pods.training.update.base import UpdateBatch
from pods.training.update.torch_engine import TorchUpdateEngine

HAVE_VLLM = importlib.util.find_spec("vllm") is not None
real_vllm = pytest.mark.skipif(
    not HAVE_VLLM, reason="vllm is not installed here: run in the environment of scripts/vllm_cpu_env.sh"
)
# vLLM (fp32, CPU) against torch, the log-prob of each generated token; measured: under 2e-6
LOGPROB_ATOL = 1e-4
MAX_NEW = 24
# The first prompt is longer than a KV block of vLLM on CPU (128 tokens), so that vLLM's prefix
# cache holds it: a weight push must not leave it serving the old weights' keys and values.
PROMPTS = ["Add the numbers, then write the sum after the equals sign. " * 3 + "12+7=", "3*4+100=", "9="]


def tiny_policy(tokenizer, seed: int = 0):
    model = build_tiny_policy(tokenizer, arch="llama", n_layer=2, d_model=128, n_head=4, max_len=320, seed=seed)
    with torch.no_grad():  # a larger EOS row (tied to the output layer): many completions stop early
        model.model.embed_tokens.weight[tokenizer.eos_token_id] *= 8
    return model


def train_config(base, **extra) -> TrainConfig:
    # engine options are TrainConfig fields like any other
    return TrainConfig(base_model=str(base), max_new_tokens=MAX_NEW, seed=0, lr=1e-2, micro_batch=12, max_grad_norm=0.0,
                       **dict(vllm_dtype="float32", vllm_enforce_eager=True, **extra))


@pytest.fixture(scope="module")
def tokenizer():
    return build_char_tokenizer()


@pytest.fixture(scope="module")
def base(tmp_path_factory, tokenizer):
    """The policy's starting point on disk, where vLLM loads its own copy from."""
    folder = tmp_path_factory.mktemp("vllm-base")
    tiny_policy(tokenizer).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def engine(base, tokenizer):
    from pods.training.rollout import make_rollout_engine

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        built = make_rollout_engine("vllm", model=tiny_policy(tokenizer), tokenizer=tokenizer,
                                    config=train_config(base))
    built.build_warnings = [str(w.message) for w in caught]
    return built


@pytest.fixture(scope="module")
def prompt_ids(tokenizer):
    return [tokenizer(text)["input_ids"] for text in PROMPTS]


def sample_with_logprobs(engine, prompt_ids, n, *, seed):
    """The engine's rollouts and vLLM's log-prob of each generated token ([rows, T], 0 on padding)."""
    params = engine.sampling_params(n, temperature=1.0, max_new_tokens=MAX_NEW, greedy=False, seed=seed,
                                    logprobs=0)  # 0: the sampled token's own log-prob, no others
    outputs = engine.llm.generate([{"prompt_token_ids": p} for p in prompt_ids], params,
                                  lora_request=engine.lora_request, use_tqdm=False)
    rollouts = engine._to_rollouts(prompt_ids, outputs, n, MAX_NEW)
    logprobs = torch.zeros(rollouts.completion_ids.shape)
    for i, completion in enumerate(c for out in outputs for c in out.outputs):
        values = [step[token].logprob for step, token in zip(completion.logprobs, completion.token_ids)]
        logprobs[i, : int(rollouts.lengths[i])] = torch.tensor(values[: int(rollouts.lengths[i])])
    return rollouts, logprobs


def all_rows(rollouts, tokenizer) -> UpdateBatch:
    return UpdateBatch.from_rollouts(rollouts, torch.arange(len(rollouts)), tokenizer.pad_token_id)


def max_gap(a: torch.Tensor, b: torch.Tensor, mask: torch.Tensor) -> float:
    return float(((a - b) * mask).abs().max())


# ------------------------------------------------------------------------------ the real engine
@pytest.mark.vllm
@real_vllm
def test_sampling_settings_n_per_prompt_and_eos(engine, tokenizer, prompt_ids):
    eos, pad, n = tokenizer.eos_token_id, tokenizer.pad_token_id, 4
    engine.sync_weights(tiny_policy(tokenizer))
    rollouts = engine.generate(prompt_ids, n, temperature=1.0, max_new_tokens=MAX_NEW, seed=1)
    assert len(rollouts) == len(PROMPTS) * n and rollouts.n == n
    assert rollouts.group.tolist() == [g for g in range(len(PROMPTS)) for _ in range(n)]
    assert rollouts.prompt_ids == prompt_ids
    stopped = 0
    for ids, mask in zip(rollouts.completion_ids.tolist(), rollouts.completion_mask.tolist()):
        length = sum(mask)
        assert mask == [1] * length + [0] * (len(mask) - length) and all(t == pad for t in ids[length:])
        if eos in ids[:length]:  # stopped: the EOS is kept as the last generated token
            assert ids.index(eos) == length - 1
            stopped += 1
        else:
            assert length == MAX_NEW  # ran into the cap
    assert 0 < stopped < len(rollouts)
    # the n completions of a prompt differ; a request seed (what evaluations pass) reproduces them
    assert len({tuple(r) for r in rollouts.completion_ids[:n].tolist()}) > 1
    again = engine.generate(prompt_ids, n, temperature=1.0, max_new_tokens=MAX_NEW, seed=1)
    assert torch.equal(again.completion_ids, rollouts.completion_ids)
    other = engine.generate(prompt_ids, n, temperature=1.0, max_new_tokens=MAX_NEW, seed=2)
    assert not torch.equal(other.completion_ids, rollouts.completion_ids)
    short = engine.generate(prompt_ids, n, temperature=1.0, max_new_tokens=3, seed=1)
    assert int(short.lengths.max()) <= 3


@pytest.mark.vllm
@real_vllm
def test_greedy_follows_the_policys_argmax(engine, tokenizer, prompt_ids):
    policy = tiny_policy(tokenizer)
    engine.sync_weights(policy)
    greedy = engine.generate(prompt_ids, 2, temperature=0.7, max_new_tokens=MAX_NEW, greedy=True)
    assert torch.equal(greedy.completion_ids[0::2], greedy.completion_ids[1::2])  # n copies of one
    # teacher-forced through the torch policy, every greedy token is its argmax
    batch = all_rows(greedy, tokenizer)
    with torch.no_grad():
        logits = policy(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
    T = batch.completion_len
    argmax = logits[:, -T - 1:-1, :].argmax(dim=-1)
    mask = batch.completion_mask.bool()
    assert torch.equal(argmax[mask], batch.input_ids[:, -T:][mask])


@pytest.mark.vllm
@real_vllm
def test_weight_push_after_full_fine_tuning_update(engine, tokenizer, prompt_ids):
    updater = TorchUpdateEngine(model=tiny_policy(tokenizer), config=train_config("unused"))
    engine.sync_weights(updater.policy)
    rollouts, vllm_logprobs = sample_with_logprobs(engine, prompt_ids, 4, seed=3)
    batch = all_rows(rollouts, tokenizer)
    before = updater.logprobs(batch)
    assert max_gap(vllm_logprobs, before, batch.completion_mask) < LOGPROB_ATOL

    advantages = torch.linspace(-1.0, 1.0, len(batch))
    for _ in range(3):
        updater.step(batch, advantages)
    after = updater.logprobs(batch)
    assert max_gap(after, before, batch.completion_mask) > 100 * LOGPROB_ATOL  # the update matters

    # the same prompts again: vLLM's prefix cache would serve their old keys/values if the push
    # did not clear it
    engine.sync_weights(updater.policy)
    rollouts, vllm_logprobs = sample_with_logprobs(engine, prompt_ids, 4, seed=4)
    batch = all_rows(rollouts, tokenizer)
    assert max_gap(vllm_logprobs, updater.logprobs(batch), batch.completion_mask) < LOGPROB_ATOL


@pytest.fixture(scope="module")
def lora_setup(base, tokenizer):
    """A LoRA policy and an engine serving its adapter. Kept to the end of the module: vLLM's
    engines in one process share its parallel state, which closing one of them tears down."""
    from pods.training.rollout.vllm import VLLMRolloutEngine
    from pods.training.update.lora import LoraUpdateEngine

    cfg = train_config(base, lora_rank=4, lora_alpha=8, lora_target_modules="q_proj,k_proj,v_proj,o_proj,up_proj")
    updater = LoraUpdateEngine(model=tiny_policy(tokenizer), config=cfg)
    return updater, VLLMRolloutEngine(model=updater.policy, tokenizer=tokenizer, config=cfg)


@pytest.mark.vllm
@real_vllm
def test_lora_adapter_per_policy_version(lora_setup, tokenizer, prompt_ids):
    updater, lora = lora_setup
    assert lora.lora_request.lora_int_id == 1 and not lora.sleeps  # the base stays resident
    assert lora.llm.llm_engine.vllm_config.lora_config.max_lora_rank == 8  # rank 4 in vLLM's next size
    rollouts, vllm_logprobs = sample_with_logprobs(lora, prompt_ids, 4, seed=5)
    batch = all_rows(rollouts, tokenizer)
    assert max_gap(vllm_logprobs, updater.logprobs(batch), batch.completion_mask) < LOGPROB_ATOL

    for _ in range(3):
        updater.step(batch, torch.linspace(-1.0, 1.0, len(batch)))
    first = lora.lora_request
    lora.sync_weights(updater.policy)
    assert lora.lora_request.lora_int_id == 2 and lora.lora_request.lora_path != first.lora_path
    rollouts, vllm_logprobs = sample_with_logprobs(lora, prompt_ids, 4, seed=6)
    batch = all_rows(rollouts, tokenizer)
    policy = updater.logprobs(batch)
    assert max_gap(vllm_logprobs, policy, batch.completion_mask) < LOGPROB_ATOL
    # it is the new adapter that vLLM applied: the base alone gives other log-probs
    assert max_gap(updater.ref_logprobs(batch), policy, batch.completion_mask) > 100 * LOGPROB_ATOL


@pytest.mark.vllm
@real_vllm
def test_sleep_mode_where_the_platform_has_it(engine, tokenizer, prompt_ids):
    platform = importlib.import_module("vllm.platforms").current_platform
    if not platform.is_sleep_mode_available():
        # the engine was asked to sleep (vllm_sleep defaults to true): it said so and stays awake
        assert not engine.sleeps and any("no sleep mode" in w for w in engine.build_warnings)
        rollouts = engine.generate(prompt_ids, 2, temperature=1.0, max_new_tokens=4, seed=0)
        assert len(rollouts) == 2 * len(PROMPTS) and not engine.asleep
        pytest.skip(f"vLLM has no sleep mode on {platform.device_name} (is_sleep_mode_available() is False; "
                    "LLM(enable_sleep_mode=True) raises there): sleep/wake around updates is shown on a GPU only")
    assert engine.sleeps
    engine.generate(prompt_ids, 2, temperature=1.0, max_new_tokens=4, seed=0)
    assert engine.asleep  # after generating, for the update
    policy = tiny_policy(tokenizer, seed=1)
    engine.sync_weights(policy)  # wakes it
    assert not engine.asleep
    rollouts, vllm_logprobs = sample_with_logprobs(engine, prompt_ids, 2, seed=0)
    batch = all_rows(rollouts, tokenizer)
    torch_logprobs = TorchUpdateEngine(model=policy, config=train_config("unused")).logprobs(batch)
    assert max_gap(vllm_logprobs, torch_logprobs, batch.completion_mask) < LOGPROB_ATOL


@pytest.mark.vllm
@real_vllm
def test_pods_steps_on_the_vllm_engine(base, tmp_path, capsys):
    """`pods train` with rollout_engine vllm, as a user starts it (its own process: one engine)."""
    steps, n, m, prompts = 4, 8, 4, 4
    overrides = dict(
        benchmark="arith", base_model=base, rollout_engine="vllm", update_engine="torch", n=n, m=m,
        rule="max_variance", prompts_per_step=prompts, micro_batch=8, max_new_tokens=MAX_NEW, max_steps=steps,
        max_train_time_s="null", eval_every_s="null", eval_every_steps=2, eval_items=16, checkpoint_every_s=0,
        num_threads=1, vllm_dtype="float32", vllm_enforce_eager="true", run_dir=tmp_path / "run",
    )
    command = [sys.executable, "-m", "pods.cli", "train", "--no-progress", *(f"{k}={v}" for k, v in overrides.items())]
    proc = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run = tmp_path / "run"
    summary = json.loads((run / "summary.json").read_text())
    records = [json.loads(line) for line in (run / "steps.jsonl").read_text().splitlines()]
    evals = [json.loads(line) for line in (run / "evals.jsonl").read_text().splitlines()]
    assert summary["status"] == "complete" and summary["steps"] == steps
    assert "rollout_engine: vllm" in (run / "config.yaml").read_text()
    assert [r["step"] for r in records] == list(range(1, steps + 1))
    assert all(r["rollouts_generated"] == prompts * n and r["rollouts_trained"] == prompts * m for r in records)
    assert all(r["tokens_generated"] > 0 and r["generate_s"] > 0 for r in records)
    assert [e["step"] for e in evals] == [0, 2, 4]
    phases = ["generate_s", "reward_s", "select_s", "logprob_s", "update_s", "step_s"]
    with capsys.disabled():
        print(f"\nPODS n={n} -> m={m}, {prompts} prompts/step, vllm rollouts + torch update on CPU, "
              f"seconds per step (generate includes the weight push)")
        print("step" + "".join(f"{p[:-2]:>10}" for p in phases))
        for r in records:
            print(f"{r['step']:>4}" + "".join(f"{r[p]:>10.3f}" for p in phases))


# ------------------------------------------------------------------- what the package cannot show
def test_without_vllm_one_clear_error(monkeypatch):
    import pods.training.rollout.vllm as module  # importing needs no vllm

    monkeypatch.setitem(sys.modules, "vllm", None)  # makes `import vllm` raise ImportError
    tokenizer = SimpleNamespace(pad_token_id=0, eos_token_id=2)
    with pytest.raises(ValueError, match="needs the vllm package.*scripts/vllm_cpu_env.sh"):
        module.VLLMRolloutEngine(model=torch.nn.Linear(1, 1), tokenizer=tokenizer, config=TrainConfig())


def test_options_and_helpers():
    from pods.training.rollout.vllm import VLLMOptions, _max_model_len, lora_capacity

    with pytest.raises(ValueError, match="vllm_gpu_memory_utilization"):
        VLLMOptions.from_config(TrainConfig(vllm_gpu_memory_utilization=1.5))
    options = VLLMOptions.from_config(TrainConfig())
    small = SimpleNamespace(config=SimpleNamespace(max_position_embeddings=128))
    large = SimpleNamespace(config=SimpleNamespace(max_position_embeddings=32768))
    assert _max_model_len(options, small, 24) == 128  # vLLM refuses more than the model's context
    assert _max_model_len(options, large, 512) == 1536
    assert _max_model_len(VLLMOptions.from_config(TrainConfig(vllm_max_model_len=4096)), large, 512) == 4096
    assert [lora_capacity(r) for r in (1, 4, 8, 9, 64)] == [1, 8, 8, 16, 64]  # vLLM's allowed max_lora_rank
