"""Update engines by name (the names: `pods.training.engines.UPDATE_ENGINES`)."""
from __future__ import annotations

from pods.registry import load
from pods.training.batches import UpdateBatch
from pods.training.engines import UPDATE_ENGINES
from pods.training.update.base import UpdateEngine


def update_engine_class(name: str) -> type[UpdateEngine]:
    return load(UPDATE_ENGINES[name].engine)


def make_update_engine(name: str, *, model, config) -> UpdateEngine:
    """Build the engine `name` training `model` with the optimiser settings of `config`."""
    return update_engine_class(name)(model=model, config=config)


__all__ = ["UPDATE_ENGINES", "UpdateBatch", "UpdateEngine", "make_update_engine", "update_engine_class"]
