"""Update engines by name. Entries are import paths so that an engine's heavy dependency
(DeepSpeed) is imported only by the runs that use it."""
from __future__ import annotations

import importlib

from pods.training.batches import UpdateBatch
from pods.registry import Registry
from pods.training.update.base import UpdateEngine

UPDATE_ENGINES: Registry[str] = Registry("update_engine")
UPDATE_ENGINES.add("torch", "pods.training.update.torch_engine:TorchUpdateEngine")  # one device, AdamW
# the torch engine training a peft LoRA adapter (on a 4-bit base optionally)
UPDATE_ENGINES.add("lora", "pods.training.update.lora:LoraUpdateEngine")
UPDATE_ENGINES.add("deepspeed", "pods.training.update.deepspeed_engine:DeepSpeedUpdateEngine")  # ZeRO-1/2/3, one process per device


def update_engine_class(name: str) -> type[UpdateEngine]:
    module, _, cls = UPDATE_ENGINES[name].partition(":")
    return getattr(importlib.import_module(module), cls)


def make_update_engine(name: str, *, model, config) -> UpdateEngine:
    """Build the engine `name` training `model` with the optimiser settings of `config`."""
    return update_engine_class(name)(model=model, config=config)


__all__ = ["UPDATE_ENGINES", "UpdateBatch", "UpdateEngine", "make_update_engine", "update_engine_class"]
