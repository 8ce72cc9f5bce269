"""TrainConfig: loading, overrides, derived values, and one clear error per bad input."""
import pytest
import yaml

from pods.training.config import TrainConfig, load_train_config
from pods.vocabulary import parse_method, run_path


def test_defaults_validate_and_name_the_run():
    cfg = load_train_config()
    assert cfg.method == "grpo-n16-m16" and cfg.rule == "identity"
    assert str(cfg.output_dir()) == run_path("results/local/runs", benchmark="arith", hardware="cpu",
                                             method="grpo-n16-m16", seed=0)


def test_yaml_then_overrides(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"n": 64, "m": 16, "lr": 3e-5, "max_steps": 10, "eval_every_s": None}))
    cfg = load_train_config(path, ["rule=random", "seed=3", "micro_batch=32", "weight_decay=1e-2"])
    assert cfg.weight_decay == 0.01  # YAML 1.1 reads 1e-2 as a string; a float field takes it
    assert (cfg.n, cfg.m, cfg.rule, cfg.seed, cfg.lr, cfg.max_steps) == (64, 16, "random", 3, 3e-5, 10)
    assert cfg.eval_every_s is None
    assert parse_method(cfg.method) == ("random", 64, 16, False, "")
    assert cfg.rollouts_generated == 8 * 64 and cfg.rollouts_trained == 8 * 16
    assert cfg.grad_accum == 4  # ceil(8 * 16 / 32)


def test_equal_generation_baseline_is_grpo_with_more_micro_batches():
    cfg = load_train_config(None, ["n=64", "m=64", "micro_batch=128"])
    assert cfg.method == "grpo-n64-m64" and cfg.grad_accum == 4


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["lrr=1e-4"], "unknown config key 'lrr' in overrides (did you mean 'lr'?)"),
        (["n=4", "m=8"], "'m'"),
        (["benchmark=gsm9k"], "'benchmark'"),
        (["n=16", "m=8", "rule=identity"], "'rule'"),
        (["rule=best"], "'rule'"),
        (["max_steps=1.5"], "'max_steps' must be int"),
        (["eval_greedy=yes please"], "'eval_greedy' must be bool"),
        (["max_steps=null", "max_train_time_s=null"], "budget"),
        (["n"], "key=value"),
        (["eval_repeats=5"], "eval_repeats"),
        (["task_options={test_sise: 10}"], "'task_options'"),
        (["lr=fast"], "'lr' must be float"),
    ],
)
def test_bad_overrides_raise_one_line_naming_the_key(overrides, message):
    with pytest.raises(ValueError) as info:
        load_train_config(None, overrides)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_unknown_key_in_file_names_the_file(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("n: 16\nmicrobatch: 8\n")
    with pytest.raises(ValueError,
                       match=r"unknown config key 'microbatch' in .*c.yaml \(did you mean 'micro_batch'\?\)"):
        load_train_config(path)


def test_missing_file():
    with pytest.raises(FileNotFoundError, match="nope.yaml"):
        load_train_config("nope.yaml")


def test_every_field_is_documented():
    import dataclasses

    assert all(f.metadata.get("help") for f in dataclasses.fields(TrainConfig))


@pytest.mark.parametrize(
    "module, options",
    [("pods.training.update.lora", "LoraOptions"), ("pods.training.update.deepspeed_engine", "DeepSpeedOptions"),
     ("pods.training.rollout.vllm", "VLLMOptions")],
)
def test_engine_options_are_config_fields_with_the_engines_defaults(module, options):
    """Engines read their options from TrainConfig fields of the same name: keep both in step."""
    import dataclasses
    import importlib

    fields = {f.name: f for f in dataclasses.fields(TrainConfig)}
    defaults = TrainConfig()
    for f in dataclasses.fields(getattr(importlib.import_module(module), options)):
        assert f.name in fields, f.name
        assert getattr(defaults,
                       f.name) == (f.default_factory() if f.default is dataclasses.MISSING else f.default), f.name


def test_paper_profile_keys_are_accepted():
    cfg = load_train_config(None, ["update_engine=lora", "rollout_engine=vllm", "lora_rank=16", "optimizer=adamw_8bit",
                                   "vllm_sleep=false", "gradient_checkpointing=true"])
    assert (cfg.lora_rank, cfg.optimizer, cfg.vllm_sleep) == (16, "adamw_8bit", False)
    with pytest.raises(ValueError, match="'optimizer'"):
        load_train_config(None, ["optimizer=adamw_8bit"])


def test_speed_options_are_accepted_and_checked():
    cfg = load_train_config(None, ["rollout_engine=hf_static", "compile_update=true"])
    assert (cfg.rollout_engine, cfg.compile_update) == ("hf_static", True)
    assert not TrainConfig().compile_update and TrainConfig().rollout_engine == "hf"  # the committed runs' path
    with pytest.raises(ValueError, match="'compile_update'.*'torch' only"):
        load_train_config(None, ["compile_update=true", "update_engine=lora"])
    with pytest.raises(ValueError, match="'rollout_engine'.*ZeRO-3"):
        load_train_config(None, ["rollout_engine=hf_static", "update_engine=deepspeed", "deepspeed_zero_stage=3"])


def test_attention_is_eager_on_a_cpu_and_the_models_own_elsewhere():
    assert load_train_config().attention() == "eager"
    assert load_train_config(None, ["device=cuda"]).attention() is None  # the model's own (sdpa)
    assert load_train_config(None, ["device=cuda", "attn_implementation=eager"]).attention() == "eager"
    assert load_train_config(None, ["attn_implementation=sdpa"]).attention() == "sdpa"
    assert load_train_config(None, ["device=cpu:0"]).attention() == "eager"
    with pytest.raises(ValueError, match="config key 'attn_implementation': must be one of") as info:
        load_train_config(None, ["attn_implementation=flash"])
    assert "\n" not in str(info.value)
