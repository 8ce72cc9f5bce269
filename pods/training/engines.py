"""The names a config may give its engines and trackers, as import paths: nothing here imports an
engine, so a config is checked (`TrainConfig.validate`, the study) without loading a model library.

Entries are `module:name` paths (`pods.registry.EngineEntry`): an engine's heavy dependency (vLLM,
DeepSpeed) is imported only by the runs that use it, and an engine's option view (the few
TrainConfig fields only it reads, `pods.training.options`) is loaded alone to check them.
"""
from __future__ import annotations

import importlib.util

from pods.registry import EngineEntry, Registry, load

ROLLOUT_ENGINES: Registry[EngineEntry] = Registry("rollout_engine")
# CPU/GPU, KV cache, each prompt prefilled once
ROLLOUT_ENGINES.add("hf", EngineEntry("pods.training.rollout.hf:HFRolloutEngine"))
# the same sampling with a static KV cache and a torch.compile'd decode step (CUDA graphs on a GPU)
ROLLOUT_ENGINES.add("hf_static", EngineEntry("pods.training.rollout.hf_static:StaticHFRolloutEngine"))
# CUDA, in-process vLLM colocated with training; weights (or the LoRA adapter) pushed after each update
ROLLOUT_ENGINES.add("vllm", EngineEntry("pods.training.rollout.vllm:VLLMRolloutEngine",
                                        options="pods.training.rollout.vllm:VLLMOptions"))

UPDATE_ENGINES: Registry[EngineEntry] = Registry("update_engine")
# one device, AdamW
UPDATE_ENGINES.add("torch", EngineEntry("pods.training.update.torch_engine:TorchUpdateEngine"))
# the torch engine training a peft LoRA adapter (on a 4-bit base optionally)
UPDATE_ENGINES.add("lora", EngineEntry("pods.training.update.lora:LoraUpdateEngine",
                                       options="pods.training.update.lora:LoraOptions"))
# ZeRO-1/2/3, one process per device
UPDATE_ENGINES.add("deepspeed", EngineEntry("pods.training.update.deepspeed_engine:DeepSpeedUpdateEngine",
                                            options="pods.training.update.deepspeed_engine:DeepSpeedOptions"))

# live trackers (`report_to`, pods.training.tracking): name -> the module that must import; all
# three come with the `track` extra
REPORTERS = {"tensorboard": "tensorboard", "wandb": "wandb", "trackio": "trackio"}
TRACK_EXTRA = "track"


def check_report_to(values: list) -> str | None:
    """Why `report_to` cannot be used (an unknown name, a library not installed), or None."""
    for name in values:
        if name not in REPORTERS:
            return f"{name!r} is not one of {', '.join(REPORTERS)}"
        if importlib.util.find_spec(REPORTERS[name]) is None:
            return f"{name!r} needs the {REPORTERS[name]} package: pip install -e '.[{TRACK_EXTRA}]'"
    return None


def check_engine_options(config):
    """The chosen engines' own checks of their options (ConfigError naming the key), now rather than
    after the model loads; returns `config`."""
    for entry in (ROLLOUT_ENGINES[config.rollout_engine], UPDATE_ENGINES[config.update_engine]):
        if entry.options is not None:
            load(entry.options).from_config(config)
    return config
