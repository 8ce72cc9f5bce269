"""Engine options are typed views of TrainConfig fields: defaults and help are stated there only."""
import dataclasses
import importlib

import pytest

from pods.training.config import TrainConfig
from pods.training.options import EngineOptions, engine_options

VIEWS = [("pods.training.update.lora", "LoraOptions"), ("pods.training.update.deepspeed_engine", "DeepSpeedOptions"),
         ("pods.training.rollout.vllm", "VLLMOptions")]


@pytest.mark.parametrize("module, name", VIEWS)
def test_every_engine_option_is_the_config_field(module, name):
    view = getattr(importlib.import_module(module), name)
    fields = {f.name: f for f in dataclasses.fields(TrainConfig)}
    for f in dataclasses.fields(view):
        source = fields[f.name]
        assert (f.type, f.default, dict(f.metadata)) == (source.type, source.default, dict(source.metadata)), f.name
    # the values are the config's (a changed one included), and the view cannot drift from it
    cfg = TrainConfig()
    options = view.from_config(cfg)
    assert all(getattr(options, f.name) == getattr(cfg, f.name) for f in dataclasses.fields(view))
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(options, dataclasses.fields(view)[0].name, None)


def test_a_view_names_only_config_fields_with_their_types():
    with pytest.raises(TypeError, match="not_a_key: not a TrainConfig field"):
        @engine_options
        class Unknown(EngineOptions):
            not_a_key: int
    with pytest.raises(TypeError, match="lora_rank: annotated str, but TrainConfig.lora_rank is int"):
        @engine_options
        class Mistyped(EngineOptions):
            lora_rank: str

    @engine_options
    class Rank(EngineOptions):
        lora_rank: int

    assert Rank.from_config(TrainConfig(lora_rank=8)).lora_rank == 8
    assert Rank().lora_rank == TrainConfig().lora_rank


def test_every_registered_engine_names_a_loadable_engine_and_option_view():
    from pods.registry import load
    from pods.training.options import EngineOptions
    from pods.training.rollout import ROLLOUT_ENGINES, RolloutEngine
    from pods.training.update import UPDATE_ENGINES, UpdateEngine

    for registry, base in ((ROLLOUT_ENGINES, RolloutEngine), (UPDATE_ENGINES, UpdateEngine)):
        for name, entry in registry.items():
            assert issubclass(load(entry.engine), base), name
            assert entry.options is None or issubclass(load(entry.options), EngineOptions), name
    # the views the engines read are the registered ones
    entries = {**dict(ROLLOUT_ENGINES.items()), **dict(UPDATE_ENGINES.items())}
    assert {name: entry.options for name, entry in entries.items() if entry.options} == {
        "vllm": "pods.training.rollout.vllm:VLLMOptions", "lora": "pods.training.update.lora:LoraOptions",
        "deepspeed": "pods.training.update.deepspeed_engine:DeepSpeedOptions"}
