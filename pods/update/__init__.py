"""Update engines by name. Entries are import paths so that an engine's heavy dependency
(DeepSpeed) is imported only by the runs that use it."""
from __future__ import annotations

import importlib

from pods.batches import UpdateBatch
from pods.update.base import UpdateEngine

UPDATE_ENGINES: dict[str, str] = {
    "torch": "pods.update.torch_engine:TorchUpdateEngine",  # one device, AdamW
    "lora": "pods.update.lora:LoraUpdateEngine",  # the torch engine training a peft adapter (4-bit base optional)
    "deepspeed": "pods.update.deepspeed_engine:DeepSpeedUpdateEngine",  # ZeRO 1-3, one process per device
    "lora": "pods.update.lora:LoraUpdateEngine",  # torch engine training a peft LoRA adapter
    "deepspeed": "pods.update.deepspeed_engine:DeepSpeedUpdateEngine",  # ZeRO-1/2/3, multi-process
}


def make_update_engine(name: str, *, model, config) -> UpdateEngine:
    """Build the engine `name` training `model` with the optimiser settings of `config`."""
    if name not in UPDATE_ENGINES:
        raise ValueError(f"unknown update_engine {name!r}; known: {', '.join(sorted(UPDATE_ENGINES))}")
    module, _, cls = UPDATE_ENGINES[name].partition(":")
    return getattr(importlib.import_module(module), cls)(model=model, config=config)


__all__ = ["UPDATE_ENGINES", "UpdateBatch", "UpdateEngine", "make_update_engine"]
