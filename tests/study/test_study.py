"""The study plan (pods.study.plan and its parts) without Snakemake: expansion against brute force, each run's trainer
config as `pods train` resolves it from the command, the precedence of the layers, and every way a
study config can be wrong failing when the study is built, naming the file and key."""
from __future__ import annotations

import itertools
import math
import shlex
from pathlib import Path

import pytest
import yaml

from pods.study.expansion import Run
from pods.study.hardware import LAUNCHERS
from pods.study.plan import Study
from pods.study.schema import PROTOCOL_KEYS, StudyError, load_study_config
from pods.training import hub
from pods.training.config import TrainConfig, load_train_config
from pods.training.cost_clock import on_cost_clock
from pods.vocabulary import parse_method, parse_run_path

REPO = Path(__file__).resolve().parents[2]
SHIPPED = ["config/smoke.yaml", "config/ablations.yaml", "config/decide.yaml", "config/large.yaml",
           "config/paper.yaml", "config/smollm2.yaml"]


@pytest.fixture(autouse=True)
def in_repo(monkeypatch):
    monkeypatch.chdir(REPO)  # the study configs name their files relative to the repository


def study(*layers, **overrides) -> Study:
    if PROTOCOL_KEYS & overrides.keys():  # a study that changes the protocol names its own
        overrides.setdefault("protocol", "test")
    return Study(load_study_config("config/config.yaml", *layers, overrides=overrides))


def brute_force_runs(config: dict) -> list[tuple]:
    runs = []
    for comp in config["comparisons"]:
        seeds = comp.get("seeds", config["seeds"])
        seeds = range(seeds) if isinstance(seeds, int) else seeds
        runs += itertools.product(comp["benchmarks"], comp["hardware"], [comp["baseline"], *comp["methods"]], seeds)
    return runs


def command_overrides(command: str) -> list[str]:
    argv = shlex.split(command)
    return argv[argv.index("--config") + 2:]


# ---------------------------------------------------------------------------------------------
# Expansion and resolution
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("layer", [None, *SHIPPED])
def test_every_arm_of_every_comparison_is_one_run(layer):
    s = study(*([layer] if layer else []))
    expected = brute_force_runs(s.config)
    assert sorted(s.runs) == sorted(Run(*key) for key in set(expected))  # each run once
    assert len(s.comparisons) == sum(len(c["benchmarks"]) * len(c["hardware"]) * len(c["methods"])
                                     for c in s.config["comparisons"])
    assert s.hardware == sorted({key[1] for key in expected})


def test_the_default_study_is_both_designs_on_both_benchmarks():
    s = study()
    assert {(c.design, c.benchmark) for c in s.comparisons} == {
        (d, b) for d in ("equal_update", "equal_generation") for b in ("arith", "arith_hard")}
    assert len(s.runs) == 36  # the PODS arm serves both designs: 2 benchmarks x 3 methods x 6 seeds
    assert s.study_rows()[0] == dict(name="main", design="equal_update", benchmark="arith", hardware="cpu",
                                     baseline="grpo-n16-m16", method="pods-max_variance-n64-m16",
                                     seeds=[0, 1, 2, 3, 4, 5], axis="cost")
    # on the cost clock (docs/verdict.md): each run reads its arm's measured seconds per step
    assert s.config["clock"] == "cost"
    assert all(c.config.step_cost_file == f"results/cost/{r.benchmark}/cpu.json" for r, c in s.run_configs.items())


def test_train_jobs_start_in_a_seeded_shuffle_that_also_orders_a_confirmations_later_seeds():
    s, again = study("config/decide.yaml"), study("config/decide.yaml")
    other = study("config/decide.yaml", schedule_seed=1)
    later = Run("arith", "cpu", "grpo-n16-m16", 106)  # look 2's seeds are not the study's `seeds`
    assert later not in s.runs
    assert s.train_priority(later) == again.train_priority(later)  # the checkpoint's next batch is ordered too
    order = sorted(s.runs, key=s.train_priority)
    assert order == sorted(again.runs, key=again.train_priority)
    assert order != sorted(s.runs, key=other.train_priority)
    assert len({s.train_priority(run) for run in s.runs}) == len(s.runs)


@pytest.mark.parametrize("layer", [None, "config/smoke.yaml", "config/paper.yaml"])
def test_each_command_resolves_to_the_checked_config(layer):
    """What `pods train` makes of the command line is the TrainConfig the study checked."""
    s = study(*([layer] if layer else []))
    for run in s.runs:
        command = s.train_command(run)
        resolved = load_train_config(s.trainer_config, command_overrides(command))
        assert resolved == s.run_configs[run].config
        method = parse_method(run.method)
        assert (resolved.n, resolved.m, resolved.rule, resolved.seed) == (method.n, method.m, method.rule, run.seed)
        assert str(resolved.output_dir()) == s.paths.run_dir(run)


def test_layers_apply_in_the_documented_order(tmp_path):
    """defaults file < hardware profile < study < benchmark < the run's identity."""
    hw = tmp_path / "hardware"
    hw.mkdir()
    profile = yaml.safe_load((REPO / "config/hardware/cpu.yaml").read_text())
    profile["train"] = {**profile["train"], "lr": 0.1, "beta": 0.1, "eps_low": 0.1, "temperature": 0.5}
    (hw / "cpu.yaml").write_text(yaml.safe_dump(profile))
    s = study(hardware_dir=str(hw), train={"lr": 0.2, "beta": 0.2},
              benchmarks={"arith": {"base_model": "warmstart", "train": {"lr": 0.3, "n": 3}},
                          "arith_hard": {"base_model": "warmstart"}})
    cfg = s.run_configs[Run("arith", "cpu", "grpo-n16-m16", 1)].config
    defaults = load_train_config("config/train-cpu.yaml")
    assert (cfg.weight_decay, cfg.micro_batch) == (defaults.weight_decay, defaults.micro_batch)
    assert cfg.max_train_time_s == 165 != defaults.max_train_time_s  # config/config.yaml's train over the file's
    assert (cfg.temperature, cfg.eps_low) == (0.5, 0.1)  # the profile's
    assert cfg.beta == 0.2  # the study's over the profile's
    assert cfg.lr == 0.3  # the benchmark's over both
    assert (cfg.n, cfg.m, cfg.seed) == (16, 16, 1)  # the run's identity over everything
    assert s.run_configs[Run("arith_hard", "cpu", "grpo-n16-m16", 1)].config.lr == 0.2


def test_hardware_profile_defaults_come_from_the_schema(tmp_path):
    hw = tmp_path / "hardware"
    hw.mkdir()
    (hw / "cpu.yaml").write_text(yaml.safe_dump({"launcher": "none", "threads": 2, "resources": {"mem_mb": 10}}))
    s = study(hardware_dir=str(hw))
    p = s.profile("cpu")
    assert (p.num_processes, p.nodes, p.launcher_args, p.launcher_prefix, dict(p.train)) == (1, 1, "", "", {})
    assert s.resource_names() == ["mem_mb"] and s.resource("cpu", "gpu") == 0
    assert s.train_command(s.runs[0]).startswith(
        "pods train --config config/train-cpu.yaml max_train_time_s=165 benchmark=arith ")


@pytest.mark.parametrize("launcher,prefix", [
    ("none", "pods train "),
    ("accelerate", "accelerate launch --num_processes 16 --num_machines 2 --config_file acc.yaml -m pods.cli train "),
    ("torchrun",
     "srun --ntasks-per-node=1 torchrun --nnodes 2 --nproc_per_node 8 --config_file acc.yaml -m pods.cli train "),
    ("deepspeed", "deepspeed --num_nodes 2 --num_gpus 8 --config_file acc.yaml --module pods.cli train "),
])
def test_launchers_start_every_process_of_a_multi_node_run(tmp_path, launcher, prefix):
    assert set(LAUNCHERS) == {"none", "accelerate", "torchrun", "deepspeed"}
    hw = tmp_path / "hardware"
    hw.mkdir()
    (hw / "gpu.yaml").write_text(yaml.safe_dump({
        "launcher": launcher, "num_processes": 8, "nodes": 2, "launcher_args": "--config_file acc.yaml",
        "launcher_prefix": "srun --ntasks-per-node=1" if launcher == "torchrun" else "", "threads": 32,
        "resources": {"gpu": 16, "slurm_partition": "gpu"}, "train": {"precision": "bf16"},
    }))
    # clock: time, as a multi-process profile needs (the cost clock measures in one process)
    s = study(hardware_dir=str(hw), seeds=[0], clock="time", comparisons=[dict(
        name="main", design="equal_generation", benchmarks=["arith"], hardware=["gpu"],
        baseline="grpo-n64-m64", methods=["pods-max_variance-n64-m16"])])
    assert len(s.runs) == 2
    for run in s.runs:
        command = s.train_command(run)
        assert command.startswith(prefix), command
        assert s.run_configs[run].config.precision == "bf16"
    assert s.profile("gpu").threads == 32 and s.resource("gpu", "slurm_partition") == "gpu"


def test_warm_start_and_base_model_paths(tmp_path):
    s = study("config/smoke.yaml")
    assert s.paths.base_model_marker("arith") == "models/smoke/arith/base/warmstart.json"
    assert s.warmstart_command("arith") == (
        "pods warmstart steps=5 batch_size=16 eval_items=20 pass_items=5 pass_samples=2 benchmark=arith "
        "out_dir=models/smoke/arith/base")
    hub = study(benchmarks={"arith": {"base_model": "Qwen/Qwen2.5-0.5B"},
                            "arith_hard": {"base_model": "models/converted/base"}})
    # a hub id is fetched once (rule fetch_hub) and read from its folder
    assert hub.paths.base_model_marker("arith") == "models/hub/models/Qwen/Qwen2.5-0.5B/hub.json"
    assert hub.paths.base_model_marker("arith_hard") == "models/converted/base/config.json"  # a rule writes it
    assert hub.run_configs[Run("arith", "cpu", "grpo-n16-m16",
                               0)].config.base_model == "models/hub/models/Qwen/Qwen2.5-0.5B"
    assert hub.hub_fetches() == [("model", "Qwen/Qwen2.5-0.5B")]


# ---------------------------------------------------------------------------------------------
# Every bad study fails when it is built, naming the file and key
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("design,baseline,method", [
    ("equal_update", "grpo-n16-m16", "pods-max_variance-n64-m16"),
    ("equal_generation", "grpo-n64-m64", "pods-max_variance-n64-m16"),
])
def test_a_trainer_key_typo_fails_in_either_design(design, baseline, method):
    comparisons = [dict(name="main", design=design, benchmarks=["arith"], hardware=["cpu"],
                        baseline=baseline, methods=[method])]
    with pytest.raises(StudyError,
                       match=r"unknown config key 'max_stepz' in the study's train \(did you mean 'max_steps'\?\)"):
        study(train={"max_stepz": 3}, comparisons=comparisons)


def test_what_a_run_would_refuse_is_refused_when_the_study_is_built():
    # a seed the task cannot take: before, every train job failed after the warm start was built
    with pytest.raises(StudyError, match=r"config key 'seed': task 'arith' takes seeds in \[0, 200\) .*got 204 "
                                         r"\(set in the identity of run"):
        study(seeds=[199, 204])
    # an engine's own option: before, checked only once the engine was built (after the model loaded)
    with pytest.raises(StudyError, match=r"config key 'deepspeed_zero_stage': must be 0, 1, 2 or 3, got 5"):
        study(train={"update_engine": "deepspeed", "deepspeed_zero_stage": 5})
    with pytest.raises(StudyError, match=r"config key 'lora_rank': must be >= 1, got 0"):
        study(train={"update_engine": "lora", "lora_rank": 0})
    with pytest.raises(StudyError, match=r"config key 'vllm_gpu_memory_utilization': must be in \(0, 1\], got 1.5"):
        study(train={"rollout_engine": "vllm", "vllm_gpu_memory_utilization": 1.5})


def test_a_bad_key_or_value_names_its_layer(tmp_path):
    with pytest.raises(StudyError, match=r"unknown config key 'lrr' in benchmarks.arith.train"):
        study(benchmarks={"arith": {"base_model": "warmstart", "train": {"lrr": 1}}})
    with pytest.raises(StudyError, match=r"config key 'lr': must be > 0, got -1.0 \(set in the study's train\)"):
        study(train={"lr": -1})
    with pytest.raises(StudyError,
                       match=r"config key 'lr' must be a finite number, got 'inf' \(set in the study's train\)"):
        study(train={"lr": "inf"})
    with pytest.raises(StudyError, match=r"config key 'eval_repeats': must be 1 with eval_greedy"):
        study(train={"eval_repeats": 5})
    hw = tmp_path / "hardware"
    hw.mkdir()
    profile = yaml.safe_load((REPO / "config/hardware/cpu.yaml").read_text())
    (hw / "cpu.yaml").write_text(yaml.safe_dump({**profile, "train": {"micro_batchh": 4}}))
    with pytest.raises(StudyError, match=f"unknown config key 'micro_batchh' in {hw / 'cpu.yaml'} train"):
        study(hardware_dir=str(hw))
    (hw / "cpu.yaml").write_text(yaml.safe_dump({**profile, "launcher": "mpirun"}))
    with pytest.raises(StudyError, match=f"{hw / 'cpu.yaml'}: launcher: 'mpirun' is not one of"):
        study(hardware_dir=str(hw))
    defaults = tmp_path / "train.yaml"
    defaults.write_text("lr: 1.0e-4\nmax_stepz: 3\n")
    with pytest.raises(StudyError, match=f"trainer_config: unknown config key 'max_stepz' in {defaults}"):
        study(trainer_config=str(defaults))
    with pytest.raises(StudyError, match="trainer_config: no file nowhere.yaml"):
        study(trainer_config="nowhere.yaml")
    with pytest.raises(StudyError, match=r"the warm start of benchmark 'arith' .*unknown warmstart key 'stepz' in "
                                         r"overrides \(did you mean 'steps'\?\)"):
        study(warmstart={"overrides": {"stepz": 5}})
    with pytest.raises(StudyError, match=r"the warm start of benchmark 'arith_hard' .*batch_size: must be >= 1"):
        study(benchmarks={"arith": {"base_model": "warmstart"},
                          "arith_hard": {"base_model": "warmstart", "warmstart": {"batch_size": 0}}})


MAIN = dict(name="main", benchmarks=["arith"], hardware=["cpu"])


@pytest.mark.parametrize("comparison,message", [
    (dict(MAIN, design="equal_update", baseline="grpo-n16-m16", methods=["pods-max_variance-n64-m8"]),
     r"comparisons\[0\].methods\[0\] on arith/cpu: equal_update trains the same m in both arms"),
    (dict(MAIN, design="equal_generation", baseline="grpo-n64-m64", methods=["pods-max_variance-n32-m16"]),
     r"comparisons\[0\].methods\[0\] on arith/cpu: equal_generation generates as many rollouts per prompt in both "
     r"arms"),
    (dict(MAIN, design="equal_update", baseline="grpo-n16-m16", methods=["pods-max_variance-n64-m16"],
          benchmarks=["gsm9k"]), r"comparisons\[0\].benchmarks: 'gsm9k' is not declared under `benchmarks`"),
    (dict(MAIN, design="equal_update", baseline="grpo-n16-m16", methods=["pods-max_variance-n64-m16"],
          hardware=["tpu"]), r"comparisons\[0\].hardware: hardware 'tpu': no profile file config/hardware/tpu.yaml"),
])
def test_design_and_label_errors(comparison, message):
    with pytest.raises(StudyError, match=message):
        study(comparisons=[comparison])


def test_equal_generation_counts_rollouts_as_the_trainer_resolves_them():
    """The authors' 8-GPU setting: GRPO-GA 16 groups of 32, PODS 4 groups of 128, 512 per prompt."""
    comparison = dict(MAIN, design="equal_generation", baseline="grpo-n32-m32", methods=["pods-max_variance-n128-m32"])
    with pytest.raises(StudyError,
                       match="baseline grpo-n32-m32 generates 32 and pods-max_variance-n128-m32 generates 128"):
        study(comparisons=[comparison])
    s = study(comparisons=[comparison], train={"rollouts_per_prompt": 512})
    assert {s.run_configs[run].arm.rollouts_per_prompt for run in s.runs} == {512}
    # m_scaling varies m on purpose: no design check
    study(comparisons=[dict(comparison, name="m_scaling", design="equal_update")])


def test_schema_errors_name_the_key():
    with pytest.raises(StudyError, match=r"config/config.yaml \+ --config: seeds.0: -1 is less than the minimum of 0"):
        study(seeds=[-1])
    with pytest.raises(StudyError, match=r"design: 'equal_updates' is not one of"):
        study(comparisons=[dict(MAIN, design="equal_updates", baseline="grpo-n16-m16",
                                methods=["pods-max_variance-n64-m16"])])
    with pytest.raises(StudyError, match=r"train: 'Max-Steps' does not match"):
        study(train={"Max-Steps": 3})


@pytest.mark.parametrize("layer", [None, "config/ablations.yaml", "config/alternatives.yaml", "config/decide.yaml",
                                   "config/confirm.yaml", "config/confirm-field.yaml"])
def test_the_committed_runs_are_what_the_study_resolves_now(layer):
    """Each committed run's config.yaml (what its trainer ran with) equals the config the shipped
    study gives it: a change to a defaults file, profile or study that would train them otherwise
    fails here, and the runs must be regenerated."""
    # keys added after these runs were trained whose defaults leave training as it was: where a run
    # reports, DAPO's dynamic sampling (off unless the method is `dapo-...`), the compiled update (off),
    # the cost clock (off without a step-cost file), where the hardware profiles are read (the name
    # is checked and the profile recorded; nothing trains otherwise), CPPO's allocation and GRESO's
    # filter (off unless the method is `cppo-...` / `greso-...`)
    added = {"report_to", "dynamic_sampling", "max_generation_rounds", "compile_update", "step_cost_file",
             "step_cost_s", "step_cost_se", "hardware_dir", "completion_allocation", "pre_rollout_filter",
             "filter_p_easy", "filter_p_hard", "filter_target_zero_variance", "filter_p_step", "filter_p_min",
             "filter_p_max", "filter_keep_floor", "filter_correct_reward"}
    # keys added later whose default changes training: a run trained before them ran as the value
    # here, which its study must therefore pin (`train` of config/decide.yaml)
    before = {"fused_activation": False, "length_buckets": False, "kv_cache_chunk": 1, "sampling": "multinomial",
              "attn_implementation": "sdpa"}
    fields = TrainConfig.__dataclass_fields__
    s = study(*([layer] if layer else []))
    later = []  # a confirmation's later looks: committed runs of seeds the study's `seeds` do not list
    if s.config.get("confirmation") and not (REPO / s.paths.runs_dir).is_dir():
        pytest.skip(f"{layer}: declared, its first look not trained yet")
    if s.config.get("confirmation"):
        found = [Run(**parse_run_path(path)) for path in sorted((REPO / s.paths.runs_dir).glob("*/*/*/seed*"))]
        later = [run for run in found if run not in s.runs]
    for run in [*s.runs, *later]:
        recorded = yaml.safe_load((REPO / s.paths.run_dir(run) / "config.yaml").read_text())
        # on the cost clock the trainer turns the budgets into steps of its arm's measured cost
        # (the committed results/cost/ file) before it records its config
        resolved = on_cost_clock(s.run_config(run).config).to_dict()
        for key in added - recorded.keys():
            default = fields[key].default_factory() if callable(fields[key].default_factory) else fields[key].default
            if resolved[key] == default:
                del resolved[key]
        for key in before.keys() - recorded.keys():
            if resolved[key] == before[key]:
                del resolved[key]
        assert recorded == resolved, run


PROTOCOL_STUDIES = [None, "config/confirm.yaml", "config/alternatives.yaml", "config/ablations.yaml",
                    "config/confirm-field.yaml"]


@pytest.mark.parametrize("layer", [None, *SHIPPED, "config/alternatives.yaml", "config/confirm.yaml",
                                   "config/confirm-field.yaml"])
def test_every_study_keeps_the_protocol_or_names_its_own(layer):
    """A study either keeps the protocol (config/protocol.yaml) as it is or names another one; the
    studies of the shipped protocol are the default study and its confirmation, the field study, its
    confirmation and the ablations."""
    from pods.study.plan import check_protocol

    protocol = yaml.safe_load((REPO / "config/protocol.yaml").read_text())
    s = study(*([layer] if layer else []))
    assert (s.config["protocol"] == protocol["protocol"]) == (layer in PROTOCOL_STUDIES), layer
    check_protocol(s.config)
    if s.config["protocol"] == protocol["protocol"]:
        assert all(s.config[k] == protocol[k] for k in ("trainer_config", "aten_cpu_capability", "clock", "train"))
    with pytest.raises(StudyError, match="a study on another protocol names it"):  # changing it under its name
        check_protocol({**s.config, "protocol": protocol["protocol"], "train": {"max_train_time_s": 200}})


@pytest.mark.parametrize("layer", PROTOCOL_STUDIES)
def test_each_committed_run_of_a_protocol_study_was_trained_under_the_protocol(layer):
    """The protocol, read off each committed run's config.yaml: the trainer defaults file's settings,
    the step costs (the protocol's, or the study's own measured alone where it sets `step_costs:
    null`), its budget and evaluation cadence turned into the arm's steps on the
    cost clock (a confirmation's later looks included)."""
    protocol = yaml.safe_load((REPO / "config/protocol.yaml").read_text())
    defaults = load_train_config(protocol["trainer_config"]).to_dict()
    s = study(*([layer] if layer else []))
    runs = sorted((REPO / s.paths.runs_dir).glob("*/*/*/seed*/config.yaml"))
    if layer and not runs:
        pytest.skip(f"{layer} has no committed run yet")
    assert runs
    budget, cadence = protocol["train"]["max_train_time_s"], defaults["eval_every_s"]
    for path in runs:
        recorded = yaml.safe_load(path.read_text())
        key = parse_run_path(path.parent)
        assert recorded["step_cost_file"] == s.paths.step_cost_file(key["benchmark"], key["hardware"]), path
        cost = recorded["step_cost_s"]
        assert recorded["max_steps"] == math.ceil(budget / cost) and recorded["max_train_time_s"] is None, path
        assert recorded["eval_every_steps"] == max(1, round(cadence / cost)), path
        for name in ("lr", "prompts_per_step", "temperature", "micro_batch", "max_new_tokens", "eval_greedy",
                     "fused_activation", "length_buckets", "kv_cache_chunk", "sampling", "attn_implementation"):
            assert recorded[name] == defaults[name], (path, name)


def test_the_schemas_design_enum_is_the_packages():
    """The designs are spelled once in pods.vocabulary; every enum of the schema read is theirs."""
    from pods.study.schema import load_schema
    from pods.vocabulary import DESIGNS

    schema = load_schema()
    enums = []

    def walk(node):
        if isinstance(node, dict):
            if "equal_update" in node.get("enum", []):
                enums.append(tuple(node["enum"]))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)
    assert enums and all(set(e) == set(DESIGNS) for e in enums)
    # and the axes a comparison may be aligned by are pods.study.analysis's
    from pods.study.curves import AXES

    axis = schema["definitions"]["comparison"]["properties"]["axis"]
    assert set(axis["enum"]) == set(AXES)
    with pytest.raises(StudyError, match="axis"):
        study(comparisons=[dict(MAIN, design="equal_update", baseline="grpo-n16-m16",
                                methods=["pods-max_variance-n64-m16"], axis="tokens")])


def test_dapo_arms_are_named_by_their_method_and_dynamic_sampling_follows_the_name():
    comparisons = [{"name": "alternatives", "design": "equal_update", "benchmarks": ["arith"], "hardware": ["cpu"],
                    "baseline": "grpo-n16-m16", "methods": ["dapo-n16-m16", "dapo-max_variance-n64-m16",
                                                            "pods-max_abs_advantage-n64-m16"]}]
    s = study(comparisons=comparisons, seeds=[0])
    configs = {run.method: s.run_configs[run].config for run in s.runs}
    assert {m: c.dynamic_sampling for m, c in configs.items()} == {
        "grpo-n16-m16": False, "dapo-n16-m16": True, "dapo-max_variance-n64-m16": True,
        "pods-max_abs_advantage-n64-m16": False}
    assert configs["dapo-max_variance-n64-m16"].rule == "max_variance"
    assert "dynamic_sampling=true" in s.train_command(next(r for r in s.runs if r.method == "dapo-n16-m16"))
    # a layer may not turn a GRPO run into a DAPO one behind its name
    with pytest.raises(StudyError,
                       match=r"a layer sets dynamic_sampling, which the method name 'grpo-n16-m16' decides"):
        study(comparisons=comparisons, seeds=[0], train={"dynamic_sampling": True})
    # a DAPO arm may be the baseline of a head-to-head, but no run is compared with itself
    s = study(comparisons=[{**comparisons[0], "baseline": "dapo-n16-m16", "methods": ["pods-max_variance-n64-m16"]}],
              seeds=[0])
    assert [(c.baseline, c.method) for c in s.comparisons] == [("dapo-n16-m16", "pods-max_variance-n64-m16")]
    with pytest.raises(StudyError, match=r"comparisons\[0\].methods: 'dapo-n16-m16' is also the baseline"):
        study(comparisons=[{**comparisons[0], "baseline": "dapo-n16-m16"}], seeds=[0])
    # a method's rule is looked up in the selection registry (the schema spells no rule names),
    # and a bad one is named with its key before anything runs
    with pytest.raises(StudyError, match=r"^comparisons\[0\].methods\[1\]: unknown selection rule 'max_varience'; "
                                         r"choose from .*max_variance"):
        study(comparisons=[{**comparisons[0], "methods": ["dapo-n16-m16", "pods-max_varience-n64-m16"]}], seeds=[0])
    with pytest.raises(StudyError, match=r"^comparisons\[0\].baseline: method 'grpo-16' is not of the form"):
        study(comparisons=[{**comparisons[0], "baseline": "grpo-16"}], seeds=[0])
    # nor can a DAPO arm run under DeepSpeed
    with pytest.raises(StudyError, match=r"dynamic_sampling': runs on one process"):
        study(comparisons=comparisons, seeds=[0], train={"update_engine": "deepspeed"})


def test_the_field_study_resolves_cppo_and_greso_by_their_names():
    """config/alternatives.yaml: CPPO draws 4x the prompts and trains GRPO
    n = 16's update, GRESO is DAPO with the filter; a layer may not set what a name decides; the
    step-cost job's shared keys are not a cppo run's own."""
    s = study("config/alternatives.yaml")
    assert {run.method for run in s.runs} == {"grpo-n16-m16", "pods-max_variance-n64-m16", "cppo-n16-m4",
                                              "dapo-n16-m16", "greso-n16-m16", "dapo-max_variance-n64-m16"}
    configs = {run.method: s.run_configs[run].config for run in s.runs if run.seed == 20 and run.benchmark == "arith"}
    cppo, grpo, pods = configs["cppo-n16-m4"], configs["grpo-n16-m16"], configs["pods-max_variance-n64-m16"]
    assert (cppo.completion_allocation, cppo.normalize_over, cppo.rule) == (True, "all", "max_abs_advantage")
    assert (cppo.prompts_drawn, cppo.rollouts_trained, cppo.rollouts_generated) == (32, grpo.rollouts_trained,
                                                                                   pods.rollouts_generated)
    assert configs["greso-n16-m16"].pre_rollout_filter and configs["greso-n16-m16"].dynamic_sampling
    assert not any(c.completion_allocation or c.pre_rollout_filter for m, c in configs.items()
                   if m not in ("cppo-n16-m4", "greso-n16-m16"))
    shared = command_overrides(s.step_cost_command("arith", "cpu"))
    assert not any(o.startswith(("completion_allocation", "normalize_over", "pre_rollout_filter")) for o in shared)
    with pytest.raises(StudyError, match="config key 'completion_allocation': is CPPO's.*set in the study's train"):
        study("config/alternatives.yaml", train={"completion_allocation": True, "normalize_over": "all"})
    dapo_only = [{"name": "x", "design": "equal_update", "benchmarks": ["arith"], "hardware": ["cpu"],
                  "baseline": "dapo-n16-m16", "methods": ["dapo-max_variance-n64-m16"]}]
    with pytest.raises(StudyError, match="a layer sets pre_rollout_filter, which the method name 'dapo-"):
        study(comparisons=dapo_only, seeds=[0], train={"pre_rollout_filter": True})


# --------------------------------------------------------------------------------------------
# Hub ids: a study turns every hub id its runs read into one fetch job
# --------------------------------------------------------------------------------------------
QWEN = "Qwen/Qwen2.5-3B-Instruct"


def test_the_paper_study_fetches_each_hub_id_once_and_its_runs_read_the_folders(tmp_path):
    config = load_study_config("config/config.yaml", "config/paper.yaml",
                               overrides={"models_dir": str(tmp_path / "models")})
    study = Study(config)
    fetches = study.hub_fetches()
    assert sorted(fetches) == sorted([
        ("model", "Qwen/Qwen2.5-3B-Instruct"), ("model", "meta-llama/Llama-3.2-3B-Instruct"),
        ("model", "Qwen/Qwen2.5-7B-Instruct"), ("dataset", "openai/gsm8k"),
        ("dataset", "EleutherAI/hendrycks_math"), ("dataset", "HuggingFaceH4/MATH-500")])
    pins = yaml.safe_load(open("config/paper.yaml"))["hub_revisions"]
    assert study.hub_fetch_command("model", QWEN).endswith(f"--revision {pins[QWEN]}")
    math = next(run for run in study.runs if run.benchmark == "math")
    cfg = study.run_configs[math].config
    assert cfg.base_model == study.paths.hub_folder("model", QWEN)
    assert cfg.task_options == {"filter_tokenizer": study.paths.hub_folder("model", QWEN), "max_prompt_tokens": 512,
                                "source": study.paths.hub_folder("dataset", "EleutherAI/hendrycks_math"),
                                "test_source": study.paths.hub_folder("dataset", "HuggingFaceH4/MATH-500")}
    assert study.paths.base_model_marker("math") == study.paths.hub_marker("model", QWEN)
    assert not any(hub.is_hub_id(v) for run in study.runs for v in study.run_configs[run].overrides.values()
                   if isinstance(v, str))


def test_reading_the_default_study_imports_no_model_library():
    """Snakemake parses the workflow (and so reads the study) in every job, on every node: checking
    each run's config loads the engines' option views and the tasks, never transformers or peft."""
    import subprocess
    import sys

    code = ("import sys\nfrom pods.study.plan import Study\nfrom pods.study.schema import load_study_config\n"
            "study = Study(load_study_config('config/config.yaml'))\nassert study.runs\n"
            "print(sorted(m for m in ('transformers', 'peft', 'datasets', 'deepspeed', 'vllm') if m in sys.modules))\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_the_schema_takes_its_name_lists_from_the_registries_that_define_them():
    """config/schema.yaml states no list of designs, aligners, axes or launchers: load_schema fills them in
    from the registries, so a new entry is one line in one registry and a typo is refused by key."""
    from pods.study.curves import ALIGNERS, AXES
    from pods.study.schema import SCHEMA, load_schema
    from pods.vocabulary import DESIGNS

    raw, schema = yaml.safe_load(SCHEMA.read_text())["definitions"], load_schema()["definitions"]
    keys = [("comparison", "design", list(DESIGNS)), ("comparison", "align", list(ALIGNERS)), ("comparison", "axis",
                                                                                               list(AXES)),
            ("hardware_profile", "launcher", list(LAUNCHERS))]
    for definition, key, names in keys:
        assert "enum" not in raw[definition]["properties"][key]
        assert schema[definition]["properties"][key]["enum"] == names
    with pytest.raises(StudyError, match=r"comparisons\.0\.align: 'nearst' is not one of \['linear', 'nearest'"):
        study(comparisons=[dict(MAIN, design="equal_update", baseline="grpo-n16-m16",
                                methods=["pods-max_variance-n64-m16"], align="nearst")])
