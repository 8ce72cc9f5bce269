"""Paper-scale configs: hardware profiles, the paper matrix, and the SLURM dry run."""
import dataclasses
import re
import shutil
import subprocess
from pathlib import Path

import jsonschema
import pytest
import yaml

from pods.training.config import TrainConfig, load_train_config
from pods.training.rollout import ROLLOUT_ENGINES
from pods.training.rollout.vllm import VLLMOptions
from pods.training.update import UPDATE_ENGINES
from pods.training.update.deepspeed_engine import DeepSpeedOptions
from pods.training.update.lora import LoraOptions
from pods.vocabulary import parse_method

ROOT = Path(__file__).resolve().parents[2]
GPU_PROFILES = ["l40s-lora", "h100x8-zero2", "a100x8-zero2", "multinode"]
# what each train key may be: a TrainConfig field or an engine option read by name
KNOWN_KEYS = {f.name for cls in (TrainConfig, LoraOptions, DeepSpeedOptions,
                                 VLLMOptions) for f in dataclasses.fields(cls)}


def load(path):
    return yaml.safe_load((ROOT / path).read_text())


@pytest.fixture(scope="module")
def profile_schema():
    schema = load("config/schema.yaml")
    return {**schema["definitions"]["hardware_profile"], "definitions": schema["definitions"]}


@pytest.mark.parametrize("name", ["cpu", *GPU_PROFILES])
def test_profiles_validate_and_name_everything(name, profile_schema):
    profile = load(f"config/hardware/{name}.yaml")
    jsonschema.validate(profile, profile_schema)
    train = profile["train"]
    assert set(train) <= KNOWN_KEYS, set(train) - KNOWN_KEYS
    assert train["rollout_engine"] in ROLLOUT_ENGINES and train["update_engine"] in UPDATE_ENGINES
    for key in ("gpu", "cpus_per_task", "mem_mb", "runtime", "nodes", "tasks"):
        assert key in profile["resources"], key
    assert profile["resources"]["nodes"] == profile.get("nodes", 1)


@pytest.mark.parametrize("name", GPU_PROFILES)
def test_gpu_profiles_one_task_per_node(name):
    profile = load(f"config/hardware/{name}.yaml")
    res = profile["resources"]
    # snakemake-executor-plugin-slurm sends `tasks` as --ntasks-per-gpu for GPU jobs unless
    # tasks_per_gpu is set: 0 keeps one task per node, the launcher fans out inside it
    assert res["tasks_per_gpu"] == 0 and res["tasks"] == res["nodes"]
    assert res["gpu"] == profile.get("num_processes", 1) * profile.get("nodes", 1)
    assert profile["train"]["device"] == "cuda" and profile["train"]["precision"] == "bf16"
    if profile.get("nodes", 1) > 1:
        assert res["mpi"] and "--ntasks-per-node=1" in profile["launcher_prefix"]


def test_engine_choices_follow_the_paper():
    l40s, h100 = load("config/hardware/l40s-lora.yaml")["train"], load("config/hardware/h100x8-zero2.yaml")["train"]
    assert (l40s["rollout_engine"], l40s["update_engine"], l40s["lora_rank"], l40s["lora_alpha"]) == ("vllm", "lora",
                                                                                                      64, 64)
    assert l40s["load_in_4bit"] and l40s["optimizer"] == "adamw_8bit" and l40s["prompts_per_step"] == 1
    assert (h100["update_engine"], h100["deepspeed_zero_stage"]) == ("deepspeed", 2)
    assert load("config/hardware/h100x8-zero2.yaml")["num_processes"] == 8


def test_paper_matrix_matches_the_paper():
    paper = load("config/paper.yaml")
    runs = {}
    for comp in paper["comparisons"]:
        for bench in comp["benchmarks"]:
            for hw in comp["hardware"]:
                for method in [comp["baseline"], *comp["methods"]]:
                    runs[(bench, hw, method)] = len(comp.get("seeds", paper["seeds"]))
    gsm8k = {parse_method(m) for (b, hw, m) in runs if b == "gsm8k"}
    # docs/paper.md 2.1.6: n in {16, 32, 64, 128, 256} at m = 16; m in {16, 8, 4, 2} at n = 64; 3 rules
    assert {x.n for x in gsm8k if x.m == 16 and x.rule in ("identity", "max_variance")} == {16, 32, 64, 128, 256}
    assert {x.m for x in gsm8k if x.n == 64 and x.rule == "max_variance"} == {16, 8, 4, 2}
    # the paper's three rules
    assert {x.rule for x in gsm8k if (x.n, x.m) == (64, 16) and x.variant == ""} == {"max_variance", "max_reward",
                                                                                    "random"}
    assert {m for (b, _, m) in runs if b == "math"} == {"grpo-n8-m8", "pods-max_variance-n32-m8"}
    assert {m for (b, _, m) in runs if b == "gsm8k-llama"} == {"grpo-n16-m16", "pods-max_variance-n64-m16"}
    assert {hw for (b, hw, _) in runs if b.startswith("gsm8k-r1")} == {"h100x8-zero2", "a100x8-zero2"}
    assert all(seeds == (5 if hw.endswith("zero2") else 10) for (_, hw, _), seeds in runs.items())
    # the field (config/alternatives.yaml at paper scale): CPPO, DAPO, GRESO, DAPO in front of PODS
    assert {m for (b, _, m) in runs if b == "gsm8k" and not m.startswith(("grpo", "pods-"))} == {
        "cppo-n16-m4", "dapo-n16-m16", "greso-n16-m16", "dapo-max_variance-n64-m16"}
    field = load("config/alternatives.yaml")["comparisons"]
    assert ({(c["name"], c["baseline"], c.get("axis"), tuple(c["methods"])) for c in paper["comparisons"]
             if c["name"] in ("field", "pods_vs_field")}
            == {(c["name"], c["baseline"], c.get("axis"), tuple(c["methods"])) for c in field})
    assert sum(runs.values()) == 200
    bench = paper["benchmarks"]
    assert bench["gsm8k-llama"]["train"]["beta"] == 0.04 and bench["gsm8k-llama"]["task"] == "gsm8k_llama"
    # budgets and evaluation cadences of docs/paper.md 2.1.7 and 2.2
    defaults = load("config/train-paper.yaml")
    assert (defaults["max_train_time_s"], defaults["eval_every_s"]) == (6 * 3600, 30 * 60)
    assert (bench["gsm8k-llama"]["train"]["max_train_time_s"], bench["gsm8k-llama"]["train"]["eval_every_s"]) == (5400,
                                                                                                                  600)
    assert (bench["gsm8k-r1"]["train"]["max_train_time_s"], bench["gsm8k-r1"]["train"]["eval_every_s"]) == (2400, 120)


def test_paper_trainer_defaults_load():
    cfg = load_train_config(ROOT / "config/train-paper.yaml", {"benchmark": "gsm8k_r1", "n": 128, "m": 32})
    assert (cfg.lr, cfg.max_grad_norm, cfg.temperature, cfg.max_new_tokens) == (5e-6, 0.1, 0.9, 512)
    assert cfg.task_options == {"filter_tokenizer": "Qwen/Qwen2.5-3B-Instruct", "max_prompt_tokens": 512}


@pytest.mark.slow
def test_slurm_dry_run_lists_the_gpu_jobs():
    pytest.importorskip("snakemake_executor_plugin_slurm")
    snakemake = shutil.which("snakemake")
    assert snakemake, "snakemake is a dependency of the package"
    out = subprocess.run(
        [snakemake, "-n", "--configfile", "config/paper.yaml", "--workflow-profile", "profiles/slurm", "reproduce"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    text = out.stdout + out.stderr
    blocks = re.findall(r"rule train:\n(.*?)(?:\n\n|\Z)", text, flags=re.S)
    assert len(blocks) == 200
    seen = {}
    for block in blocks:
        hw = re.search(r"hardware=([\w.-]+)", block)[1]
        res = dict(kv.split("=", 1) for kv in re.search(r"resources: (.*)", block)[1].split(", "))
        seen[hw] = seen.get(hw, 0) + 1
        assert res["gpu"] == {"l40s-lora": "1", "h100x8-zero2": "8", "a100x8-zero2": "8"}[hw]
        assert res["tasks"] == "1" and res["tasks_per_gpu"] == "0" and res["nodes"] == "1"
        cmd = re.search(r"Shell command: (.*)", block)[1]
        if hw == "l40s-lora":
            assert cmd.startswith("pods train") and "rollout_engine=vllm" in cmd and "update_engine=lora" in cmd
        else:
            assert cmd.startswith("deepspeed --num_nodes 1 --num_gpus 8 --no_local_rank --module pods.cli train")
    assert seen == {"l40s-lora": 180, "h100x8-zero2": 10, "a100x8-zero2": 10}
    # the CPU rules keep the profile's small defaults
    analyze = re.search(r"rule analyze:\n(.*?)(?:\n\n|\Z)", text, flags=re.S)[1]
    assert "gpu=" not in analyze and "mem_mb=4000" in analyze
