"""Rollout engines by name (the names: `pods.training.engines.ROLLOUT_ENGINES`)."""
from __future__ import annotations

from pods.registry import load
from pods.training.batches import Rollouts
from pods.training.engines import ROLLOUT_ENGINES
from pods.training.rollout.base import RolloutEngine, encode_prompts


def rollout_engine_class(name: str) -> type[RolloutEngine]:
    return load(ROLLOUT_ENGINES[name].engine)


def make_rollout_engine(name: str, *, model, tokenizer, config) -> RolloutEngine:
    """Build the engine `name` sampling from `model` (a TrainConfig supplies its options)."""
    return rollout_engine_class(name)(model=model, tokenizer=tokenizer, config=config)


__all__ = ["ROLLOUT_ENGINES", "RolloutEngine", "Rollouts", "encode_prompts", "make_rollout_engine",
           "rollout_engine_class"]
