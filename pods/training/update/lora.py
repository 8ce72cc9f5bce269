"""`lora` update engine: the `torch` engine training a peft LoRA adapter on a frozen base.

The paper's single-GPU setting (docs/paper.md 2.1.3): rank 64, alpha 64 on every attention and MLP
projection, a 4-bit base (QLoRA-style, bitsandbytes) and 8-bit AdamW. bitsandbytes >= 0.50 runs
both on a CPU as well (tests/training/test_bnb.py runs the l40s-lora recipe there and lists which of its
operations use a CPU kernel and which a generic torch fallback). The reference policy is the
same model with the adapter disabled, so a KL term (beta > 0, the Llama runs) costs no second copy
of the weights. Checkpoints hold the adapter and the optimiser only: the base never changes.
"""
from __future__ import annotations

import importlib.util

import torch

from pods.training.options import ConfigError, EngineOptions, engine_options
from pods.training.update.base import UpdateBatch, make_optimizer, warmup_schedule
from pods.training.update.torch_engine import TorchUpdateEngine

OPTIMIZERS = ("adamw", "adamw_8bit")


@engine_options
class LoraOptions(EngineOptions):
    """The LoRA engine's settings: the TrainConfig fields of these names (defaults and help there)."""

    lora_rank: int
    lora_alpha: int
    lora_dropout: float
    lora_target_modules: str
    load_in_4bit: bool
    optimizer: str
    gradient_checkpointing: bool

    def validate(self) -> "LoraOptions":
        if self.lora_rank < 1:
            raise ConfigError("lora_rank", f"config key 'lora_rank': must be >= 1, got {self.lora_rank}")
        if self.lora_alpha <= 0:
            raise ConfigError("lora_alpha", f"config key 'lora_alpha': must be > 0, got {self.lora_alpha}")
        if self.optimizer not in OPTIMIZERS:
            raise ConfigError("optimizer",
                              f"config key 'optimizer': must be one of {', '.join(OPTIMIZERS)}, got {self.optimizer!r}")
        if not self.target_modules:
            raise ConfigError("lora_target_modules", "config key 'lora_target_modules': must name at least one module")
        for key, needed in (("load_in_4bit", self.load_in_4bit), ("optimizer", self.optimizer == "adamw_8bit")):
            if needed and importlib.util.find_spec("bitsandbytes") is None:
                raise ConfigError(key,
                                  f"config key {key!r} needs bitsandbytes: pip install -e '.[gpu]' (or '.[dev]' on a "
                                  f"CPU)")
        return self

    @property
    def target_modules(self) -> list[str] | str:
        if self.lora_target_modules.strip() == "all-linear":
            return "all-linear"
        return [name.strip() for name in self.lora_target_modules.split(",") if name.strip()]


def load_4bit(path, device) -> torch.nn.Module:
    """The base model in 4-bit NF4 with bf16 compute, as QLoRA (and the authors' Unsloth setup)."""
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    quantization = BitsAndBytesConfig(
        load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.bfloat16,
        bnb_4bit_use_double_quant=True,
    )
    return AutoModelForCausalLM.from_pretrained(path, quantization_config=quantization, device_map={"": str(device)})


def add_adapter(model: torch.nn.Module, options: LoraOptions, seed: int = 0):
    """`model` wrapped by peft with a fresh LoRA adapter (B = 0, so it starts as the base model)."""
    from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training

    if getattr(model, "is_loaded_in_4bit", False):
        model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=options.gradient_checkpointing)
    elif options.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.enable_input_require_grads()
    lora = LoraConfig(
        r=options.lora_rank, lora_alpha=options.lora_alpha, lora_dropout=options.lora_dropout,
        target_modules=options.target_modules, bias="none", task_type="CAUSAL_LM",
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)  # the adapter's A matrices: same start for every arm of a seed
        return get_peft_model(model, lora)


class LoraUpdateEngine(TorchUpdateEngine):
    """The `torch` engine's loop and loss, with only a LoRA adapter trainable.

    Args:
        model: the base policy (a full-precision copy; with `load_in_4bit` the engine reloads the
            base from `config.base_model` in 4-bit instead, the only way bitsandbytes quantises).
        config: a TrainConfig; the fields of `LoraOptions` choose the adapter and the optimiser.
    """


    def __init__(self, *, model, config):
        self.options = LoraOptions.from_config(config)
        self.cfg = config
        self.device = torch.device(config.device)
        if self.options.load_in_4bit:
            model = load_4bit(config.model_path() if hasattr(config, "model_path") else config.base_model, self.device)
        self.policy = add_adapter(model.to(self.device) if not self.options.load_in_4bit else model, self.options,
                                  config.seed)
        self.policy.eval()  # no dropout in the base: the ratio and KL compare log-probs of the same weights
        params = [p for p in self.policy.parameters() if p.requires_grad]
        self.optimizer = make_optimizer(params, config, name=self.options.optimizer)
        self.scheduler = warmup_schedule(self.optimizer, config.lr_warmup_steps)
        self.reference = None  # the reference is the base: `ref_logprobs` disables the adapter

    def ref_logprobs(self, batch: UpdateBatch) -> torch.Tensor:
        with self.policy.disable_adapter():
            return self._logprobs_of(self.policy, batch)

    def adapter_state(self) -> dict:
        from peft import get_peft_model_state_dict

        # Only the trainable tensors go to peft: the model's full state_dict() would serialise the 4-bit
        # base too, and on CPUs with AVX512-BF16 bitsandbytes unpacks its CPU weight layout to do so,
        # which changes the base's later log-probs (by ~4e-3 nats) and would make a resumed run differ.
        trainable = {name: p for name, p in self.policy.named_parameters() if p.requires_grad}
        state = get_peft_model_state_dict(self.policy, state_dict=trainable)
        return {k: v.detach().cpu().clone() for k, v in state.items()}

    def state_dict(self) -> dict:
        return {
            "adapter": self.adapter_state(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
        }

    def load_state_dict(self, state: dict) -> None:
        from peft import set_peft_model_state_dict

        result = set_peft_model_state_dict(self.policy, state["adapter"])
        if getattr(result, "unexpected_keys", None):
            raise ValueError(f"checkpoint adapter does not fit this model: unexpected keys "
                             f"{result.unexpected_keys[:3]}")
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
