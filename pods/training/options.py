"""Engine options as typed views of TrainConfig fields: each knob's default and help live once.

An engine (lora, deepspeed, vllm) reads a few TrainConfig fields that only it uses. It declares
them as a class with bare annotations, names and types only, decorated with `@engine_options`:

    @engine_options
    class LoraOptions(EngineOptions):
        lora_rank: int
        lora_alpha: int

        def validate(self):  # the engine's own range checks, if any
            ...

The decorator makes it a frozen dataclass whose every field is the TrainConfig field of the same
name (its default and help are copied from there, never restated); a name that is no TrainConfig
field, or a type that is not the field's, fails at import. `Options.from_config(config)` reads the
values off a TrainConfig (a config object lacking one, e.g. a test's stand-in, gets TrainConfig's
default) and validates them.
"""
from __future__ import annotations

import dataclasses
import inspect
import typing
from typing import TypeVar

from pods.training.config import ConfigError, TrainConfig  # noqa: F401 (ConfigError: what an engine's checks raise)

T = TypeVar("T", bound="EngineOptions")


class EngineOptions:
    """Base of the engines' option views; see the module docstring."""

    @classmethod
    def from_config(cls: type[T], config) -> T:
        values = {f.name: getattr(config, f.name) for f in dataclasses.fields(cls) if hasattr(config, f.name)}
        return cls(**values).validate()

    def validate(self: T) -> T:
        """The engine's own checks of its values (ConfigError naming the config key); returns self."""
        return self


def engine_options(cls: type[T]) -> type[T]:
    """`cls` as a frozen dataclass of the TrainConfig fields its annotations name."""
    source = {f.name: f for f in dataclasses.fields(TrainConfig)}
    config_types = typing.get_type_hints(TrainConfig)
    own = inspect.get_annotations(cls)
    for name in own:
        if name not in source:
            raise TypeError(f"{cls.__name__}.{name}: not a TrainConfig field (engine options are config keys)")
    view_types = typing.get_type_hints(cls)
    for name in own:
        field = source[name]
        if view_types[name] != config_types[name]:
            raise TypeError(f"{cls.__name__}.{name}: annotated {_type_name(view_types[name])}, but TrainConfig.{name} "
                            f"is {_type_name(config_types[name])}")
        if field.default is not dataclasses.MISSING:
            setattr(cls, name, dataclasses.field(default=field.default, metadata=field.metadata))
        else:
            setattr(cls, name, dataclasses.field(default_factory=field.default_factory, metadata=field.metadata))
    return dataclasses.dataclass(frozen=True)(cls)


def _type_name(annotation) -> str:
    return annotation.__name__ if isinstance(annotation, type) else str(annotation)
