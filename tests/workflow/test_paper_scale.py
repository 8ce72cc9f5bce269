"""The paper-scale study's own commands, run for real on CPU: what a cluster job executes is what
this test executes, short of the GPU.

`snakemake -n -p --configfile config/paper.yaml` prints every job's shell command. The test runs
the `fetch_hub` commands against an offline hub cache holding tiny models under the paper's model
ids and tiny datasets in the hub's layouts (tests/hub_cache.py), then one train command of each
setting (GSM8K, MATH, Llama on the L40S recipe; the open-r1 recipe of the 8-GPU design; CPPO and
GRESO from the field on GSM8K) with only
what a CPU needs swapped (`CPU_SWAPS`), for two steps, and reads the runs back.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import hub_cache
from pods.vocabulary import RUN_LAYOUT

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow

# What a CPU needs instead of the cluster's: the device and engines (no CUDA, vLLM, bitsandbytes
# kernels or DeepSpeed launcher), one process for the 8-GPU design's 8 (one prompt each), a step
# budget, and a completion length: random weights never emit the end token, so every completion
# runs to max_new_tokens (512 or 1024 on the cluster).
CPU_SWAPS = {"device": "cpu", "rollout_engine": "hf", "update_engine": None, "load_in_4bit": "false",
             "optimizer": "adamw", "num_threads": "2", "prompts_per_step": "1", "max_new_tokens": "8",
             "max_steps": "2", "max_train_time_s": "null", "eval_every_s": "null", "eval_every_steps": "2",
             "checkpoint_every_s": "0"}
# One run of each setting, seed 0: the PODS arm, and on GSM8K the field's two arms whose steps
# differ from PODS's (CPPO's allocation over more prompts, GRESO's filter before generation).
SETTINGS = {label: RUN_LAYOUT.format(benchmark=benchmark, hardware=hardware, method=method, seed=0)
            for label, benchmark, hardware, method in (
    ("gsm8k", "gsm8k", "l40s-lora", "pods-max_variance-n64-m16"),
    ("math", "math", "l40s-lora", "pods-max_variance-n32-m8"),
    ("gsm8k-llama", "gsm8k-llama", "l40s-lora", "pods-max_variance-n64-m16"),
    ("gsm8k-r1", "gsm8k-r1", "h100x8-zero2", "pods-max_variance-n128-m32"),
    ("gsm8k-cppo", "gsm8k", "l40s-lora", "cppo-n16-m4"),
    ("gsm8k-greso", "gsm8k", "l40s-lora", "greso-n16-m16"))}


def shell_commands(dry_run: str, rule: str) -> list[str]:
    """The shell command of every job of `rule` in `snakemake -n -p` output."""
    commands = []
    for block in dry_run.split("\n\n"):
        if re.search(rf"^(?:localrule|rule) {rule}:", block, flags=re.M):
            commands += re.findall(r"^Shell command: (.*)$", block, flags=re.M)
    return commands


def on_cpu(command: str) -> list[str]:
    """A train command as the cluster would run it, made runnable on this CPU (CPU_SWAPS)."""
    argv = shlex.split(command.split(" > ")[0])
    argv = argv[argv.index("train"):]  # the launcher (none, torchrun, deepspeed) goes
    overrides = dict(a.split("=", 1) for a in argv if "=" in a and not a.startswith("-"))
    swaps = dict(CPU_SWAPS)
    swaps["update_engine"] = "lora" if overrides.get("update_engine") == "lora" else "torch"
    kept = [a for a in argv if a.split("=", 1)[0] not in swaps]
    return [sys.executable, "-m", "pods.cli", *kept, *(f"{k}={v}" for k, v in swaps.items())]


@pytest.fixture(scope="module")
def paper_study(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("paper_scale")
    pins = yaml.safe_load((REPO / "config/paper.yaml").read_text())["hub_revisions"]
    cache = hub_cache.build(tmp / "hub_cache", pins)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_HUB_CACHE": str(cache),
           "PYTHONUNBUFFERED": "1"}
    out = tmp / "out.yaml"
    out.write_text(yaml.safe_dump({"results_dir": str(tmp / "results"), "models_dir": str(tmp / "models"),
                                   "figures_dir": str(tmp / "figures")}))
    proc = subprocess.run([sys.executable, "-m", "snakemake", "reproduce", "-n", "-p", "--configfile",
                           "config/paper.yaml", str(out)], cwd=REPO, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return {"tmp": tmp, "env": env, "pins": pins, "dry_run": proc.stdout}


def test_every_train_job_reads_a_folder_a_fetch_job_writes(paper_study):
    fetches = shell_commands(paper_study["dry_run"], "fetch_hub")
    trains = shell_commands(paper_study["dry_run"], "train")
    assert len(trains) == 200 and len(fetches) == 6
    fetched = {shlex.split(c)[shlex.split(c).index("--out") + 1] for c in fetches}
    for command in trains:
        overrides = dict(a.split("=", 1) for a in shlex.split(command.split(" > ")[0]) if "=" in a)
        options = yaml.safe_load(overrides["task_options"])
        assert overrides["base_model"] in fetched
        assert {options["filter_tokenizer"], options["source"]} <= fetched
    # each pinned revision is what its fetch job asks for
    for command in fetches:
        argv = shlex.split(command.split(" > ")[0])
        revision = paper_study["pins"][argv[2]]
        assert argv[argv.index("--revision") + 1] == revision


@pytest.fixture(scope="module")
def fetched(paper_study):
    for command in shell_commands(paper_study["dry_run"], "fetch_hub"):
        argv = shlex.split(command.split(" > ")[0])
        proc = subprocess.run(argv, cwd=REPO, env=paper_study["env"], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
    return paper_study


@pytest.mark.parametrize("setting", SETTINGS)
def test_the_paper_studys_train_command_runs_two_steps(fetched, setting):
    run = SETTINGS[setting]
    (command,) = [c for c in shell_commands(fetched["dry_run"], "train") if f"/runs/{run} " in c]
    proc = subprocess.run(on_cpu(command), cwd=REPO, env=fetched["env"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run_dir = fetched["tmp"] / "results/runs" / run
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "complete" and summary["steps"] == 2
    origin = summary["provenance"]["hub"]
    hub_id = {"gsm8k-llama": "meta-llama/Llama-3.2-3B-Instruct"}.get(setting, "Qwen/Qwen2.5-3B-Instruct")
    assert origin["hub_id"] == hub_id and origin["commit"] == fetched["pins"][hub_id]
    evals = [json.loads(line) for line in (run_dir / "evals.jsonl").read_text().splitlines()]
    assert [e["step"] for e in evals] == [0, 2]
    # the task's own test split: GSM8K test, or MATH-500 for the MATH runs (2 problems each here)
    assert {e["eval_set"] for e in evals} == {"test"} and all(e["n_items"] == 2 for e in evals)
