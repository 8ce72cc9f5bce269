"""Rollout engines by name. Entries are import paths so that an engine's heavy dependency
(vLLM) is imported only by the runs that use it."""
from __future__ import annotations

import importlib

from pods.training.batches import Rollouts
from pods.registry import Registry
from pods.training.rollout.base import RolloutEngine, encode_prompts

ROLLOUT_ENGINES: Registry[str] = Registry("rollout_engine")
ROLLOUT_ENGINES.add("hf", "pods.training.rollout.hf:HFRolloutEngine")  # CPU/GPU, KV cache, each prompt prefilled once
# CUDA, in-process vLLM colocated with training; weights (or the LoRA adapter) pushed after each update
ROLLOUT_ENGINES.add("vllm", "pods.training.rollout.vllm:VLLMRolloutEngine")


def rollout_engine_class(name: str) -> type[RolloutEngine]:
    module, _, cls = ROLLOUT_ENGINES[name].partition(":")
    return getattr(importlib.import_module(module), cls)


def make_rollout_engine(name: str, *, model, tokenizer, config) -> RolloutEngine:
    """Build the engine `name` sampling from `model` (a TrainConfig supplies its options)."""
    return rollout_engine_class(name)(model=model, tokenizer=tokenizer, config=config)


__all__ = ["ROLLOUT_ENGINES", "RolloutEngine", "Rollouts", "encode_prompts", "make_rollout_engine", "rollout_engine_class"]
