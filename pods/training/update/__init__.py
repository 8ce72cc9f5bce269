"""Update engines by name. Entries are import paths so that an engine's heavy dependency
(DeepSpeed) is imported only by the runs that use it."""
from __future__ import annotations

from pods.training.batches import UpdateBatch
from pods.registry import EngineEntry, Registry, load
from pods.training.update.base import UpdateEngine

UPDATE_ENGINES: Registry[EngineEntry] = Registry("update_engine")
# one device, AdamW
UPDATE_ENGINES.add("torch", EngineEntry("pods.training.update.torch_engine:TorchUpdateEngine"))
# the torch engine training a peft LoRA adapter (on a 4-bit base optionally)
UPDATE_ENGINES.add("lora", EngineEntry("pods.training.update.lora:LoraUpdateEngine",
                                       options="pods.training.update.lora:LoraOptions"))
# ZeRO-1/2/3, one process per device
UPDATE_ENGINES.add("deepspeed", EngineEntry("pods.training.update.deepspeed_engine:DeepSpeedUpdateEngine",
                                            options="pods.training.update.deepspeed_engine:DeepSpeedOptions"))


def update_engine_class(name: str) -> type[UpdateEngine]:
    return load(UPDATE_ENGINES[name].engine)


def make_update_engine(name: str, *, model, config) -> UpdateEngine:
    """Build the engine `name` training `model` with the optimiser settings of `config`."""
    return update_engine_class(name)(model=model, config=config)


__all__ = ["UPDATE_ENGINES", "UpdateBatch", "UpdateEngine", "make_update_engine", "update_engine_class"]
