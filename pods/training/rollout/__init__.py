"""Rollout engines by name. Entries are import paths so that an engine's heavy dependency
(vLLM) is imported only by the runs that use it."""
from __future__ import annotations

from pods.training.batches import Rollouts
from pods.registry import EngineEntry, Registry, load
from pods.training.rollout.base import RolloutEngine, encode_prompts

ROLLOUT_ENGINES: Registry[EngineEntry] = Registry("rollout_engine")
# CPU/GPU, KV cache, each prompt prefilled once
ROLLOUT_ENGINES.add("hf", EngineEntry("pods.training.rollout.hf:HFRolloutEngine"))
# CUDA, in-process vLLM colocated with training; weights (or the LoRA adapter) pushed after each update
ROLLOUT_ENGINES.add("vllm", EngineEntry("pods.training.rollout.vllm:VLLMRolloutEngine",
                                        options="pods.training.rollout.vllm:VLLMOptions"))


def rollout_engine_class(name: str) -> type[RolloutEngine]:
    return load(ROLLOUT_ENGINES[name].engine)


def make_rollout_engine(name: str, *, model, tokenizer, config) -> RolloutEngine:
    """Build the engine `name` sampling from `model` (a TrainConfig supplies its options)."""
    return rollout_engine_class(name)(model=model, tokenizer=tokenizer, config=config)


__all__ = ["ROLLOUT_ENGINES", "RolloutEngine", "Rollouts", "encode_prompts", "make_rollout_engine", "rollout_engine_class"]
