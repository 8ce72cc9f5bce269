"""`vllm` rollout engine: an in-process vLLM engine colocated with training on the same GPU.

vLLM keeps its own copy of the weights. After each update the trainer calls `sync_weights`:
- full fine-tuning: the policy's tensors are pushed into vLLM's model in place (`load_weights`);
- LoRA: the base never changes, so only the current adapter is written to a fresh folder and
  passed with every request (`LoRARequest`, a new id per version so vLLM does not reuse a stale
  cached adapter).
With `vllm_sleep` the engine sleeps between generations (KV cache freed, weights offloaded), so
the update gets the GPU memory back; a LoRA run keeps the base resident instead.

vLLM is an optional dependency (the `gpu` extra): importing this module works without it, and
building the engine without it fails with one line.
"""
from __future__ import annotations

import dataclasses
import importlib
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import torch

from pods.rollout.base import RolloutEngine, Rollouts
from pods.update.deepspeed_engine import full_weights


@dataclass
class VLLMOptions:
    """The vLLM engine's settings; each is read from the TrainConfig field of the same name."""

    vllm_gpu_memory_utilization: float = field(
        default=0.5, metadata={"help": "Share of the GPU memory vLLM may take (weights + KV cache); the update gets the rest."}
    )
    vllm_sleep: bool = field(
        default=True,
        metadata={"help": "Sleep between generations (free the KV cache, offload weights) where vLLM supports it."},
    )
    vllm_max_model_len: int | None = field(
        default=None, metadata={"help": "Longest prompt + completion in tokens; null: max_new_tokens + 1024."}
    )
    vllm_enforce_eager: bool = field(
        default=False, metadata={"help": "Skip CUDA-graph capture (slower decoding, faster start, less memory)."}
    )
    vllm_dtype: str = field(default="auto", metadata={"help": "Weight dtype of vLLM's copy (auto: the checkpoint's)."})

    @classmethod
    def from_config(cls, config) -> "VLLMOptions":
        values = {f.name: getattr(config, f.name) for f in dataclasses.fields(cls) if hasattr(config, f.name)}
        options = cls(**values)
        if not 0.0 < options.vllm_gpu_memory_utilization <= 1.0:
            raise ValueError(
                f"config key 'vllm_gpu_memory_utilization': must be in (0, 1], got {options.vllm_gpu_memory_utilization}"
            )
        return options


def import_vllm():
    """The vllm module, or one clear error line when it is not installed."""
    try:
        return importlib.import_module("vllm")
    except ImportError:
        raise ValueError("rollout_engine 'vllm' needs the vllm package (CUDA only): pip install 'pods[gpu]'") from None


def _peft_rank(model) -> int | None:
    """The LoRA rank of a peft-wrapped policy, or None for a plain model."""
    config = getattr(model, "peft_config", None)
    if not config:
        return None
    return max(c.r for c in config.values())


def _inner_model(llm):
    # In-process engines (V0, or V1 with multiprocessing off) expose the model on the driver worker.
    executor = llm.llm_engine.model_executor
    worker = executor.driver_worker
    worker = getattr(worker, "worker", worker)  # V1 wraps the worker once more
    return worker.model_runner.model


class VLLMRolloutEngine(RolloutEngine):
    """Sampling with vLLM from the trainer's current policy.

    Args:
        model: the policy the update engine trains (a peft model for LoRA runs).
        tokenizer: supplies `pad_token_id` and `eos_token_id`.
        config: a TrainConfig (`base_model`, `seed`, `max_new_tokens`) plus the `VLLMOptions` fields.
    """

    def __init__(self, *, model, tokenizer, config):
        vllm = import_vllm()
        self.vllm = vllm
        self.options = VLLMOptions.from_config(config)
        self.pad_id, self.eos_id = tokenizer.pad_token_id, tokenizer.eos_token_id
        if self.pad_id is None or self.eos_id is None:
            raise ValueError("the tokenizer needs pad_token_id and eos_token_id")
        self.lora_rank = _peft_rank(model)
        # the trainer's process must own the engine so that weights can be pushed in place
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        base = config.model_path() if hasattr(config, "model_path") else config.base_model
        kwargs = dict(
            model=str(base),
            tokenizer=str(base),
            dtype=self.options.vllm_dtype,
            gpu_memory_utilization=self.options.vllm_gpu_memory_utilization,
            max_model_len=self.options.vllm_max_model_len or config.max_new_tokens + 1024,
            enforce_eager=self.options.vllm_enforce_eager,
            seed=config.seed,
            enable_prefix_caching=True,  # the n rollouts of a prompt share its prefill
        )
        self.sleeps = self.options.vllm_sleep and self.lora_rank is None
        if self.sleeps:
            kwargs["enable_sleep_mode"] = True
        if self.lora_rank is not None:
            kwargs.update(enable_lora=True, max_lora_rank=self.lora_rank, max_loras=1)
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            # one engine per training process, each on its own GPU, under the training launcher
            kwargs["distributed_executor_backend"] = "external_launcher"
        self.llm = vllm.LLM(**kwargs)
        self.asleep = False
        self.lora_request = None
        self.lora_version = 0
        self._adapter_dir = tempfile.TemporaryDirectory(prefix="pods-lora-") if self.lora_rank is not None else None
        self.sync_weights(model)

    # ------------------------------------------------------------------------------- weights
    def sync_weights(self, model) -> None:
        if self.lora_rank is not None:
            self.lora_version += 1  # vLLM caches adapters by id: a new version needs a new id
            folder = Path(self._adapter_dir.name) / f"v{self.lora_version}"
            model.save_pretrained(folder)  # a peft model writes the adapter only
            self.lora_request = importlib.import_module("vllm.lora.request").LoRARequest(
                f"policy-v{self.lora_version}", self.lora_version, str(folder)
            )
            return
        self._wake()
        module = model.module if hasattr(model, "module") else model  # a DeepSpeed/DDP wrapper
        _inner_model(self.llm).load_weights(full_weights(module))  # ZeRO-3 shards gathered one at a time
        if self.sleeps:  # prefix-cache entries were computed with the old weights
            self.llm.reset_prefix_cache()

    def _wake(self) -> None:
        if self.asleep:
            self.llm.wake_up()
            self.asleep = False

    # ---------------------------------------------------------------------------- sampling
    def sampling_params(self, n: int, *, temperature: float, max_new_tokens: int, greedy: bool, seed: int | None):
        return self.vllm.SamplingParams(
            n=n,
            temperature=0.0 if greedy else temperature,
            top_p=1.0,
            max_tokens=max_new_tokens,
            seed=seed,
            stop_token_ids=[self.eos_id],
            skip_special_tokens=False,
        )

    @torch.no_grad()
    def generate(self, prompt_ids, n, *, temperature, max_new_tokens, greedy=False, seed=None) -> Rollouts:
        if not prompt_ids or any(len(p) == 0 for p in prompt_ids):
            raise ValueError("generate needs at least one prompt and no empty prompt")
        self._wake()
        params = self.sampling_params(n, temperature=temperature, max_new_tokens=max_new_tokens, greedy=greedy, seed=seed)
        outputs = self.llm.generate(
            [{"prompt_token_ids": list(p)} for p in prompt_ids], params,
            lora_request=self.lora_request, use_tqdm=False,
        )
        if self.sleeps:
            self.llm.sleep(level=1)  # the update gets the memory of the weights and the KV cache
            self.asleep = True
        return self._to_rollouts(prompt_ids, outputs, n, max_new_tokens)

    def _to_rollouts(self, prompt_ids, outputs, n, max_new_tokens) -> Rollouts:
        rows = []
        for g, out in enumerate(outputs):
            if len(out.outputs) != n:
                raise ValueError(f"vLLM returned {len(out.outputs)} completions for prompt {g}, expected {n}")
            for completion in out.outputs:
                ids = list(completion.token_ids)[:max_new_tokens]
                if self.eos_id in ids:  # keep the EOS (the policy chose it), nothing after it
                    ids = ids[: ids.index(self.eos_id) + 1]
                rows.append(ids)
        T = max(1, max(len(r) for r in rows))
        completion_ids = torch.full((len(rows), T), self.pad_id, dtype=torch.long)
        completion_mask = torch.zeros((len(rows), T), dtype=torch.long)
        for i, ids in enumerate(rows):
            completion_ids[i, : len(ids)] = torch.tensor(ids, dtype=torch.long)
            completion_mask[i, : len(ids)] = 1
        group = torch.arange(len(prompt_ids)).repeat_interleave(n)
        return Rollouts(
            prompt_ids=[list(p) for p in prompt_ids], completion_ids=completion_ids,
            completion_mask=completion_mask, group=group, n=n,
        )
