"""The Snakemake workflow: which jobs a study config yields, that bad configs stop before any job,
that cached results are never retrained, and (slow) the smoke study run for real end to end.

Every call runs Snakemake in the repository (so the workflow profile and the configs are the
real ones) with the study's outputs redirected to a temporary folder.
"""
from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from helpers import run_at
from pods.vocabulary import parse_method

REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}


def snakemake(*args: str, tmp: Path, check: bool = True) -> subprocess.CompletedProcess:
    """Run snakemake in the repo; outputs go under `tmp` via a last config layer."""
    out = tmp / "out.yaml"
    if not out.exists():
        out.write_text(yaml.safe_dump({
            "results_dir": str(tmp / "results"), "models_dir": str(tmp / "models"),
            "figures_dir": str(tmp / "figures"),
        }))
    args = list(args)
    # --configfile takes several files: the redirect goes last so that it wins over a study's.
    if "--configfile" in args:
        i = args.index("--configfile") + 1
        while i < len(args) and not args[i].startswith("-"):
            i += 1
        args.insert(i, str(out))
    else:
        args += ["--configfile", str(out)]
    proc = subprocess.run([sys.executable, "-m", "snakemake", *args], cwd=REPO, env=ENV,
                          capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


def job_counts(text: str) -> dict[str, int]:
    """The 'Job stats' table Snakemake prints (dry run or real run)."""
    block = text.split("Job stats:", 1)[1]
    counts = {}
    for line in block.splitlines()[3:]:
        parts = line.split()
        if len(parts) != 2 or not parts[1].isdigit():
            break
        counts[parts[0]] = int(parts[1])
    return counts


def train_commands(text: str) -> list[str]:
    return sorted(set(re.findall(r"^(?:Shell command: )?(.*\bpods(?:\.cli)? train .*)$", text, flags=re.M)))


def parse_overrides(command: str) -> dict[str, str]:
    return dict(tok.split("=", 1) for tok in command.split(" > ")[0].split() if "=" in tok and not tok.startswith("-"))


def expected_runs(config: dict) -> set[tuple]:
    """Brute force over the config: every arm of every comparison on every benchmark/hardware/seed."""
    runs = set()
    for comp in config["comparisons"]:
        seeds = comp.get("seeds", config["seeds"])
        seeds = range(seeds) if isinstance(seeds, int) else seeds
        for bench, hw, method, seed in itertools.product(
            comp["benchmarks"], comp["hardware"], [comp["baseline"], *comp["methods"]], seeds
        ):
            runs.add((bench, hw, method, seed))
    return runs


def finished_run(path: Path) -> None:
    """The files of a run the trainer completed: the committed run of the same name where there is
    one (the workflow reads finished runs before analysing them anew), else stand-ins whose contents
    only the DAG sees."""
    committed = REPO / "results/runs" / Path(*path.parts[-4:])
    if committed.is_dir():
        shutil.copytree(committed, path, ignore=shutil.ignore_patterns("checkpoint", "logs"))
        return
    path.mkdir(parents=True)
    (path / "summary.json").write_text(json.dumps({"status": "complete"}))
    (path / "evals.jsonl").write_text("")
    (path / "steps.jsonl").write_text("")


def study_config(*layers: str) -> dict:
    """The layers as the Snakefile merges them at the top level: the protocol first."""
    config = {}
    for layer in ("config/protocol.yaml", "config/config.yaml", *layers):
        config.update(yaml.safe_load((REPO / layer).read_text()))
    return config


# ---------------------------------------------------------------------------------------------
# Dry runs
# ---------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_default_study_dry_run_trains_each_run_once(tmp_path):
    proc = snakemake("-n", "-p", "reproduce", tmp=tmp_path)
    config = study_config()
    runs = expected_runs(config)
    # Both designs on both benchmarks, 6 seeds each (docs/embedded-default.md: what fits 60 minutes).
    designs = {(c["design"], b) for c in config["comparisons"] for b in c["benchmarks"]}
    assert designs == {(d, b) for d in ("equal_update", "equal_generation") for b in ("arith", "arith_hard")}
    assert all(len(c.get("seeds", config["seeds"])) >= 4 for c in config["comparisons"])
    # The PODS arm serves both designs but is trained once: 2 benchmarks x 3 methods x 6 seeds.
    assert len(runs) == 36
    counts = job_counts(proc.stdout)
    assert counts["train"] == len(runs)
    assert counts["warmstart"] == 2 and counts["analyze"] == 1
    # the cost clock on the protocol's step costs (config/protocol.yaml `step_costs`): the committed
    # measurement is read, never re-measured, wherever the results go
    assert config["clock"] == "cost" and config["step_costs"] == "results/cost" and "step_cost" not in counts

    commands = train_commands(proc.stdout)
    assert len(commands) == len(runs)
    seen = set()
    for command in commands:
        assert command.startswith("pods train --config config/train-cpu.yaml ")
        o = parse_overrides(command)
        method = Path(o["run_dir"]).parent.name
        parsed = parse_method(method)
        assert (int(o["n"]), int(o["m"]), o["rule"]) == (parsed.n, parsed.m, parsed.rule)
        assert o["run_dir"] == str(run_at(tmp_path / "results/runs", o["benchmark"], o["hardware"], method, o["seed"]))
        assert o["base_model"] == str(tmp_path / f"models/{o['benchmark']}/base")
        assert o["num_threads"] == "1"
        assert o["step_cost_file"] == f"results/cost/{o['benchmark']}/{o['hardware']}.json"
        seen.add((o["benchmark"], o["hardware"], method, int(o["seed"])))
    assert seen == runs


@pytest.mark.slow
def test_ablations_train_in_a_folder_of_their_own_with_their_own_step_costs(tmp_path):
    """The ablations keep the protocol (the cost clock, 165 s) but measure their nine arms' step costs
    alone in their own folder (`step_costs: null`), and train in their own runs folder: the main
    study's runs, finished beside them, are neither read nor retrained."""
    main = expected_runs(study_config())
    for bench, hw, method, seed in main:
        finished_run(run_at(tmp_path / "results/runs", bench, hw, method, seed))
    # the helper's last layer, written here: its results_dir is the ablations' own folder
    (tmp_path / "out.yaml").write_text(yaml.safe_dump({
        "results_dir": str(tmp_path / "results/ablations"), "models_dir": str(tmp_path / "models"),
        "figures_dir": str(tmp_path / "figures")}))
    proc = snakemake("-n", "-p", "reproduce", "--configfile", "config/ablations.yaml", tmp=tmp_path)
    ablation = expected_runs(study_config("config/ablations.yaml"))
    counts = job_counts(proc.stdout)
    assert counts["train"] == len(ablation) == 27 and counts["step_cost"] == 1   # arith on cpu, once
    overrides = list(map(parse_overrides, train_commands(proc.stdout)))
    trained = {(o["benchmark"], o["hardware"], Path(o["run_dir"]).parent.name, int(o["seed"])) for o in overrides}
    assert trained == ablation
    assert all(o["run_dir"].startswith(str(tmp_path / "results/ablations/runs/")) for o in overrides)
    cost_file = str(tmp_path / "results/ablations/cost/arith/cpu.json")
    assert all(o["max_train_time_s"] == "165" and o["step_cost_file"] == cost_file for o in overrides)
    # Its tables go beside, not over, the default study's.
    assert str(tmp_path / "results/ablations/summary.csv") in proc.stdout
    assert str(tmp_path / "results/ablations/decomposition.csv") in proc.stdout
    assert str(tmp_path / "results/decomposition.csv") not in proc.stdout
    for kind in ("n_scaling", "m_scaling", "rule"):
        assert str(tmp_path / f"figures/arith/cpu/{kind}.png") in proc.stdout


@pytest.mark.slow
def test_cached_results_are_never_retrained(tmp_path):
    """`figures` on committed runs: no warm start, no training, even with no models/ and touched configs."""
    for bench, hw, method, seed in expected_runs(study_config()):
        run = run_at(tmp_path / "results/runs", bench, hw, method, seed)
        finished_run(run)
    # A trainer defaults file newer than every run: ancient, so it triggers nothing.
    trainer = tmp_path / "train.yaml"
    trainer.write_text((REPO / study_config()["trainer_config"]).read_text())
    layer = tmp_path / "trainer.yaml"
    # another trainer file is another protocol (config/protocol.yaml), so the layer names its own
    layer.write_text(yaml.safe_dump({"trainer_config": str(trainer), "protocol": "test-touched-trainer"}))
    for target in ("figures", "reproduce"):
        counts = job_counts(snakemake("-n", target, "--configfile", str(layer), tmp=tmp_path).stdout)
        assert "train" not in counts and "warmstart" not in counts
        assert counts["analyze"] == 1 and counts["plots"] == 1


ANALYSIS_RULES = {"study_file", "analyze", "plots", "project", "verdict_views"}


@pytest.mark.slow
def test_a_fresh_copy_redoes_no_analysis_whatever_its_file_times_and_redoes_it_when_an_input_changes(tmp_path):
    """The committed tables are re-used by content (pods.study.stamps), not by times: a copy of the
    results whose every file has a random time, with no Snakemake metadata (a fresh clone), lists
    no analysis job; an input whose content changed reruns the analysis even when it is older."""
    import random
    import shutil

    for folder in ("results", "figures"):
        shutil.copytree(REPO / folder, tmp_path / folder, ignore=shutil.ignore_patterns("logs", "checkpoint", "local"))
    layer = tmp_path / "copy.yaml"
    layer.write_text(yaml.safe_dump({
        "paper_summary": str(tmp_path / "results/paper/summary.csv"),
        "cost_files": [str(tmp_path / f"results/hardware/h200-{kind}.json") for kind in ("lora", "full")]}))
    rng = random.Random(0)
    now = time.time()
    for path in [*(tmp_path / "results").rglob("*"), *(tmp_path / "figures").rglob("*")]:
        stamp = now - rng.uniform(0, 86400)
        os.utime(path, (stamp, stamp))
    counts = job_counts(snakemake("-n", "reproduce", "--configfile", str(layer), tmp=tmp_path).stdout)
    assert not ANALYSIS_RULES & set(counts), counts

    evals = tmp_path / "results/runs/arith/cpu/grpo-n16-m16/seed0/evals.jsonl"  # a run of the default study
    before = evals.stat().st_mtime
    lines = evals.read_text().splitlines(keepends=True)  # a later evaluation's length: still a valid run
    evals.write_text("".join([lines[0], lines[1].replace('"mean_length": ', '"mean_length": 1', 1), *lines[2:]]))
    os.utime(evals, (before - 86400, before - 86400))  # older than every table: content, not times
    counts = job_counts(snakemake("-n", "reproduce", "--configfile", str(layer), tmp=tmp_path).stdout)
    assert {"analyze", "plots", "project", "verdict_views"} <= set(counts), counts


@pytest.mark.slow
def test_a_fresh_clone_regenerates_nothing_and_leaves_git_status_clean(tmp_path):
    """A clone of the committed tree (every file at its checkout time, no Snakemake metadata): the
    README's `reproduce`, `figures` and every committed study's `figures` and finished `confirm`
    re-use the committed tables and figures by content and leave `git status` clean; an unfinished
    confirmation's `confirm` plans only the next batch's training, never its committed looks."""
    status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO, capture_output=True,
                            text=True)
    if status.returncode != 0 or status.stdout.strip():
        pytest.skip("the repository has uncommitted changes: a clone would test another tree")
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True)
    env = {**ENV, "PYTHONPATH": str(clone)}

    def run(*args):
        proc = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "1", *args], cwd=clone, env=env,
                              capture_output=True, text=True)
        assert proc.returncode == 0, f"snakemake {' '.join(args)}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        return proc.stdout + proc.stderr

    out = run("reproduce")
    assert "Bottom line" in out or "Confirmation on fresh seeds" in out
    run("figures")
    for layer in ("config/ablations.yaml", "config/alternatives.yaml"):
        run("figures", "--configfile", layer)
    run("confirm", "--configfile", "config/decide.yaml")          # finished: prints its last look
    for layer, folder in (("config/confirm.yaml", "results/confirm"), ("config/confirm-field.yaml",
                                                                       "results/confirm-field")):
        planned = run("-n", "confirm", "--configfile", layer)
        if "Job stats" in planned:                                 # unfinished: the next batch only
            jobs = set(job_counts(planned)) - {"total"}
            assert jobs <= {"warmstart", "step_cost", "train", "look_study", "look_summary", "look", "look_check",
                            "confirm"}, jobs
            committed = sorted((clone / folder / "confirm").glob("summary_look*.csv"))
            for path in committed:
                assert f"output: {path.relative_to(clone)}" not in planned, path
    dirty = subprocess.run(["git", "status", "--porcelain"], cwd=clone, capture_output=True, text=True).stdout
    assert dirty.strip() == "", dirty


@pytest.mark.slow
def test_a_paper_summary_not_yet_written_stops_only_the_targets_that_read_it(tmp_path):
    """`snakemake paper_figures` writes the paper summary, so it must parse without it; reproduce,
    which reads it, is refused before any job, naming the file and the command that writes it."""
    missing = tmp_path / "paper/summary.csv"
    counts = job_counts(snakemake("-n", "paper_figures", "--config", f"paper_summary={missing}", tmp=tmp_path).stdout)
    assert counts["paper_figures"] == 1
    proc = snakemake("-n", "reproduce", "--config", f"paper_summary={missing}", tmp=tmp_path, check=False)
    assert proc.returncode != 0 and "Job stats" not in proc.stdout + proc.stderr
    assert f"paper_summary: no file {missing} (`snakemake paper_figures` writes it;" in proc.stdout + proc.stderr


@pytest.mark.slow
def test_a_base_built_otherwise_is_refused_before_any_job_with_the_command_that_builds_the_right_one(tmp_path):
    """A base under models_dir that `pods warmstart` built by hand with another recipe or on other
    CPU kernels is another model: the runs still to train would start from it without a word."""
    from dataclasses import asdict

    from pods.training.warmstart_config import load_warmstart_config

    base = tmp_path / "models/arith/base"
    base.mkdir(parents=True)
    recipe = asdict(load_warmstart_config(None, ["benchmark=arith", f"out_dir={base}"]))
    (base / "warmstart.json").write_text(json.dumps({"config": recipe, "environment": {"cpu_capability": "AVX2"}}))
    snakemake("-n", "reproduce", tmp=tmp_path)  # the study's own recipe and kernels: accepted
    (base / "warmstart.json").write_text(json.dumps({"config": recipe, "environment": {"cpu_capability": "AVX512"}}))
    proc = snakemake("-n", "reproduce", tmp=tmp_path, check=False)
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "Job stats" not in text
    assert (f"{base} is not this study's warm start (CPU kernels AVX512, not AVX2): delete it and the workflow builds "
            f"it, "
            f"or build it as the workflow does: rm -r {base} && ATEN_CPU_CAPABILITY=avx2 pods warmstart "
            f"benchmark=arith out_dir={base}") in text


@pytest.mark.slow
def test_figures_refuses_to_train(tmp_path):
    """`figures` never schedules training: unfinished runs are an error naming the way out."""
    runs = sorted(expected_runs(study_config()))
    for bench, hw, method, seed in runs[:-1]:
        run = run_at(tmp_path / "results/runs", bench, hw, method, seed)
        finished_run(run)
    last = run_at(tmp_path / "results/runs", *runs[-1])
    last.mkdir(parents=True)
    (last / "summary.json").write_text(json.dumps({"status": "running"}))  # killed mid-run
    proc = snakemake("--cores", "1", "figures", tmp=tmp_path, check=False)
    assert proc.returncode != 0
    assert f"1 of the study's {len(runs)} runs have no finished results (e.g. {last})" in proc.stdout + proc.stderr
    assert "Job stats" not in proc.stdout + proc.stderr
    # reproduce trains exactly the missing run (after the warm start of its benchmark)
    (last / "summary.json").unlink()
    counts = job_counts(snakemake("-n", "-p", "reproduce", tmp=tmp_path).stdout)
    assert counts["train"] == 1 and counts["warmstart"] == 1


@pytest.mark.slow
def test_a_failed_run_stops_only_the_targets_that_read_it(tmp_path):
    runs = sorted(expected_runs(study_config()))
    for bench, hw, method, seed in runs[1:]:
        finished_run(run_at(tmp_path / "results/runs", bench, hw, method, seed))
    failed = run_at(tmp_path / "results/runs", *runs[0])
    failed.mkdir(parents=True)
    (failed / "summary.json").write_text(json.dumps({"status": "failed", "method": runs[0][2], "seed": runs[0][3],
                                                     "failure": {"step": 7, "checkpoint_step": 5,
                                                                 "reason": "non-finite loss (nan) in the update "
                                                                           "(during step 7)"}}))
    # `figures` reads every run: it stops before any job, naming the run, its reason and the way out
    proc = snakemake("--cores", "1", "figures", tmp=tmp_path, check=False)
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "1 run(s) of this study stopped on a numerical failure" in text
    assert f"{failed}: failed at step 7: non-finite loss (nan) in the update (during step 7)" in text
    assert "Delete a run's folder to train it again" in text and "Job stats" not in text
    # what does not read the run is not stopped: the paper's figures, the DAG of `reproduce`, whose
    # other runs train (here: none left) and whose analysis job refuses the failed run by name
    # (`pods analyze`: tests/shared/test_runs.py)
    for target in ("paper_figures", "reproduce"):
        proc = snakemake("-n", target, tmp=tmp_path, check=False)
        text = proc.stdout + proc.stderr
        assert proc.returncode == 0, text[-2000:]
        assert "train" not in job_counts(text)


# Every bad-config path is a unit test of the study model (tests/study/test_study.py); these check that
# the workflow builds the model while it parses: the error line, and no DAG, no job, no folder.
BAD_CONFIGS = [
    ({"seed": [0]}, "seed"),  # the schema, checked while the Snakefile is parsed
    # the issue this guards: a typo in a trainer key with only equal_update comparisons (whose
    # design check never loads a trainer config) used to dry-run train jobs that each failed
    ({"train": {"max_stepz": 3}, "comparisons": [
        {"name": "main", "design": "equal_update", "benchmarks": ["arith"], "hardware": ["cpu"],
         "baseline": "grpo-n16-m16", "methods": ["pods-max_variance-n64-m16"]}]},
     "unknown config key 'max_stepz' in the study's train (did you mean 'max_steps'?)"),
]


@pytest.mark.parametrize("bad,key", BAD_CONFIGS)
def test_bad_config_fails_before_any_job_naming_the_key(tmp_path, bad, key):
    layer = tmp_path / "bad.yaml"
    layer.write_text(yaml.safe_dump(bad))
    proc = snakemake("--cores", "1", "reproduce", "--configfile", str(layer), tmp=tmp_path, check=False)
    assert proc.returncode != 0
    text = proc.stdout + proc.stderr
    assert key in text
    assert "Job stats" not in text  # failed while parsing: no DAG, no job
    assert not (tmp_path / "results").exists() and not (tmp_path / "models").exists()


@pytest.mark.parametrize("option, line", [
    ("train={max_stepz: 5}", "unknown config key 'max_stepz' in the study's train (did you mean 'max_steps'?)"),
    ("seeds=[-1]", "config: seeds.0: -1 is less than the minimum of 0"),  # the schema's, in the Snakefile
    ("warmstart={overrides: {stepz: 5}}", "the warm start of benchmark 'arith' (warmstart.overrides, "
     "benchmarks.arith.warmstart): unknown warmstart key 'stepz' in overrides (did you mean 'steps'?)"),
])
def test_a_config_error_under_snakemake_is_the_packages_one_line(tmp_path, option, line):
    """As `pods` says a bad input: one line, no rule file, line number or traceback around it."""
    proc = snakemake("-n", "figures", "--config", option, tmp=tmp_path, check=False)
    assert proc.returncode == 1
    assert proc.stderr.splitlines()[-1] == f"pods: error: {line}"
    text = proc.stdout + proc.stderr
    assert text.count(line) == 1 and "pods: error:" not in text.replace(f"pods: error: {line}", "")
    assert not any(word in text for word in ("Traceback", 'File "', ".smk", "Snakefile\", line ", "StudyError"))


@pytest.mark.slow
def test_hardware_profiles_give_threads_and_resources(tmp_path):
    """A profile's threads and scheduler resources reach the train jobs (the command line is
    tests/study/test_study.py's)."""
    hw = tmp_path / "hardware"
    hw.mkdir()
    profile = {"launcher": "torchrun", "num_processes": 8, "nodes": 2, "launcher_prefix": "srun --ntasks-per-node=1",
               "threads": 32, "resources": {"gpu": 16, "mem_mb": 64000, "nodes": 2, "tasks": 2,
                                            "slurm_partition": "gpu"},
               "train": {"device": "cuda", "precision": "bf16"}}
    (hw / "gpu.yaml").write_text(yaml.safe_dump(profile))
    layer = tmp_path / "gpu.yaml"
    layer.write_text(yaml.safe_dump({
        # the cost clock is one process's: a multi-GPU study runs on a protocol of its own
        "hardware_dir": str(hw), "seeds": [0], "clock": "time", "protocol": "test-gpu-time",
        "comparisons": [{"name": "main", "design": "equal_generation", "benchmarks": ["arith"],
                         "hardware": ["gpu"], "baseline": "grpo-n64-m64", "methods": ["pods-max_variance-n64-m16"]}],
    }))
    # A cluster-sized core count: locally Snakemake caps a job's threads at --cores.
    proc = snakemake("-n", "-p", "--cores", "64", "reproduce", "--configfile", str(layer), tmp=tmp_path)
    commands = train_commands(proc.stdout)
    assert len(commands) == 2 and all(c.startswith("srun --ntasks-per-node=1 torchrun --nnodes 2 ") for c in commands)
    resources = [line for line in proc.stdout.splitlines() if "resources:" in line and "gpu=16" in line]
    assert len(resources) == 2
    assert all("mem_mb=64000" in r and "slurm_partition=gpu" in r for r in resources)
    assert proc.stdout.count("threads: 32") == 2


# ---------------------------------------------------------------------------------------------
# The smoke study, for real
# ---------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_smoke_study_end_to_end_then_figures_from_cache(tmp_path):
    config = study_config("config/smoke.yaml")
    runs = expected_runs(config)
    proc = snakemake("--cores", "2", "reproduce", "--configfile", "config/smoke.yaml", tmp=tmp_path)
    counts = job_counts(proc.stdout + proc.stderr)
    assert counts["train"] == len(runs) and counts["warmstart"] == len({run[0] for run in runs})

    results = tmp_path / "results"
    for bench, hw, method, seed in runs:
        run = run_at(results / "runs", bench, hw, method, seed)
        summary = json.loads((run / "summary.json").read_text())
        assert summary["status"] == "complete" and summary["method"] == method and summary["seed"] == seed
        steps = [json.loads(line) for line in (run / "steps.jsonl").read_text().splitlines()]
        parsed = parse_method(method)
        prompts = steps[0]["rollouts_generated"] // parsed.n
        assert all(s["rollouts_generated"] == prompts * parsed.n and s["rollouts_trained"] == prompts * parsed.m
                   for s in steps)
        evals = [json.loads(line) for line in (run / "evals.jsonl").read_text().splitlines()]
        assert evals[0]["train_time_s"] == 0 and len(evals) >= 2

    import pandas as pd

    table = pd.read_csv(results / "summary.csv")
    study = yaml.safe_load((results / "study.yaml").read_text())["comparisons"]
    expected_rows = {(c["benchmark"], c["design"], c["baseline"], c["method"]) for c in study}
    assert set(zip(table["benchmark"], table["design"], table["baseline"], table["method"])) == expected_rows
    assert (results / "summary.md").read_text().count("\n") > len(study)
    # the calibration table opens with the declared primaries at the study's own seed count (2 here)
    calibration_md = (results / "calibration.md").read_text()
    assert "## Declared primaries at 2 seeds per arm" in calibration_md and "Predictive check" in calibration_md
    assert set(pd.read_csv(results / "calibration.csv")["seeds"]) == {2, 4, 10, 30}
    # reproduce ends with its bottom line on stdout, read off the table it wrote
    from pods.study.headline import bottom_line, read_rows

    expected = bottom_line(read_rows(results / "summary.csv"), tables=[str(results / "summary.md"),
                           str(results / "summary.csv"), f"{tmp_path / 'figures'}/"], runs_total=len(runs),
                           runs_reused=0, analysis="rewritten now")
    ends = proc.stdout.rstrip().endswith("\n".join(expected[-3:]))
    assert ends or "\n".join(expected) in proc.stdout, proc.stdout[-3000:]
    runs_line = f"runs: {len(runs)} in the study, 0 re-used as finished before this command, {len(runs)} trained now"
    assert runs_line in proc.stdout
    # the analysis prints no numerical warning (an all-NaN slice, a mean of nothing) on a tiny study
    analysis_logs = [p for p in (results / "logs").glob("*.log")] + sorted((results / "logs").glob("confirm/*.log"))
    printed = proc.stdout + proc.stderr + "".join(p.read_text() for p in analysis_logs)
    assert "RuntimeWarning" not in printed, [line for line in printed.splitlines() if "Warning" in line][:10]
    figures = sorted((tmp_path / "figures").rglob("*.png"))
    assert figures and all(p.with_suffix(".pdf").stat().st_size > 0 for p in figures)

    # Cached results: without the models and with tables and figures gone, `figures` rebuilds
    # them from the run files alone, rewriting none of them.
    import shutil

    shutil.rmtree(tmp_path / "models")
    run_files = {p: p.stat().st_mtime_ns for p in (results / "runs").rglob("*") if p.is_file()}
    (results / "summary.csv").unlink()
    shutil.rmtree(tmp_path / "figures")
    proc = snakemake("figures", "--configfile", "config/smoke.yaml", tmp=tmp_path)
    counts = job_counts(proc.stdout + proc.stderr)
    assert "train" not in counts and "warmstart" not in counts
    assert sorted((tmp_path / "figures").rglob("*.png")) == figures
    assert {p: p.stat().st_mtime_ns for p in (results / "runs").rglob("*") if p.is_file()} == run_files

    # The report: every figure in it, with its caption.
    report = tmp_path / "report.html"
    snakemake("--report", str(report), "--configfile", "config/smoke.yaml", tmp=tmp_path)
    html = report.read_text()
    for png in figures:
        assert png.name in html
    for caption in ("Selection rules at the same n and m", "Seconds per optimiser step", "One row per comparison"):
        assert caption in html


# ---------------------------------------------------------------------------------------------
# The cost clock and the confirmation
# ---------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_the_confirmation_dry_run_trains_its_first_batch_on_the_cost_clock(tmp_path):
    proc = snakemake("-n", "-p", "confirm", "--configfile", "config/decide.yaml", tmp=tmp_path)
    counts = job_counts(proc.stdout)
    # the first look only: 4 fresh seed pairs of the default study's 3 arms on 2 benchmarks; each
    # benchmark's step costs measured once, before its runs
    assert counts["train"] == 24 and counts["step_cost"] == 2 and counts["look"] == 1 and counts["confirm"] == 1
    seeds = {int(parse_overrides(c)["seed"]) for c in train_commands(proc.stdout)}
    assert seeds == {100, 101, 102, 103}
    for command in train_commands(proc.stdout):
        o = parse_overrides(command)
        assert o["step_cost_file"] == str(tmp_path / f"results/cost/{o['benchmark']}/cpu.json")
    assert "pods cost --no-progress --config config/train-cpu.yaml" in proc.stdout


@pytest.mark.slow
def test_a_later_look_trains_only_its_own_seeds_even_when_the_bases_are_rebuilt(tmp_path):
    """The committed first look, its runs and step costs in a fresh folder without the base models:
    the next batch trains seeds 104-107 on the committed costs, and the rebuilt bases neither
    re-measure a cost nor retrain a finished run."""
    committed, results = REPO / "results/decide", tmp_path / "results"
    shutil.copytree(committed / "cost", results / "cost")
    for run in committed.glob("runs/*/*/*/seed10[0-3]"):  # look 1's seeds, whatever later looks added
        shutil.copytree(run, results / run.relative_to(committed))
    now = time.time()  # the look's tables newer than the runs they read, in the order rules make them
    for i, name in enumerate(("study_look1.yaml", "summary_look1.csv", "look1.csv", "look1.md")):
        (results / "confirm").mkdir(exist_ok=True)
        shutil.copy(committed / "confirm" / name, results / "confirm" / name)
        os.utime(results / "confirm" / name, (now + i + 1, now + i + 1))
    # look 1's content stamps: what says its tables are fresh, whatever the files' times
    (results / "stamps").mkdir()
    for name in ("look_summary1.json", "look1.json"):
        shutil.copy(committed / "stamps" / name, results / "stamps" / name)
    # the design the sequence was declared on, beside the stamps that name it by relative path
    shutil.copy(committed / "design_summary.csv", results / "design_summary.csv")
    layer = tmp_path / "design.yaml"
    layer.write_text(yaml.safe_dump({"confirmation": {"design_summary": str(results / "design_summary.csv")}}))
    proc = snakemake("-n", "-p", "confirm", "--configfile", "config/decide.yaml", str(layer), tmp=tmp_path)
    counts = job_counts(proc.stdout)
    assert counts["warmstart"] == 2 and "step_cost" not in counts
    assert counts["train"] == 24
    assert {int(parse_overrides(c)["seed"]) for c in train_commands(proc.stdout)} == {104, 105, 106, 107}
    for command in train_commands(proc.stdout):
        o = parse_overrides(command)
        assert o["step_cost_file"] == str(results / f"cost/{o['benchmark']}/cpu.json")


@pytest.mark.slow
def test_the_smoke_study_on_the_cost_clock_agrees_with_the_measured_clock(tmp_path):
    """Runs on the cost clock: their curves sit at step x the arm's measured cost, and on a machine
    doing nothing else the seconds a step took in the run itself agree with that cost (a sanity
    bound, not a benchmark: the interleaved measurement ran alone, the runs two at a time). Where
    the runs' own load record says the machine was busy with other work, the clocks cannot agree
    and only that is said."""
    snakemake("--cores", "2", "reproduce", "--configfile", "config/smoke.yaml", "--config", "clock=cost",
              tmp=tmp_path)
    results = tmp_path / "results"
    costs = json.loads(next((results / "cost").rglob("*.json")).read_text())["methods"]
    import pandas as pd

    table = pd.read_csv(results / "summary.csv")
    assert set(table["axis"]) == {"cost"}
    loads, ratios = [], []
    for summary_path in (results / "runs").rglob("summary.json"):
        summary = json.loads(summary_path.read_text())
        c = costs[summary["method"]]["s_per_step"]
        assert summary["step_cost_s"] == pytest.approx(c)
        evals = [json.loads(line) for line in (summary_path.parent / "evals.jsonl").read_text().splitlines()]
        assert all(e["cost_time_s"] == pytest.approx(e["step"] * c, abs=1e-3) for e in evals)
        steps = [json.loads(line) for line in (summary_path.parent / "steps.jsonl").read_text().splitlines()]
        loads.append(max(s.get("load_avg_1m", 0.0) for s in steps))
        ratios.append(summary["s_per_step"] / c)
    if max(loads) > 1.5 * (os.cpu_count() or 2):
        pytest.skip(f"the machine ran other work during the runs (1-minute load up to {max(loads):.1f}); "
                    f"measured / modelled step cost {min(ratios):.2f}-{max(ratios):.2f}")
    assert all(0.5 < r < 2.0 for r in ratios), ratios


def test_a_results_dir_inside_a_run_directory_is_refused_while_parsing(tmp_path):
    run = tmp_path / "results/runs/arith/cpu/grpo-n16-m16/seed0"
    finished_run(run)
    before = sorted(p.name for p in run.iterdir())
    proc = snakemake("-n", "reproduce", "--config", f"results_dir={run}", tmp=tmp_path, check=False)
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "Job stats" not in text
    assert f"results_dir: {run} is inside the run directory {run}; give the study a folder of its own" in text
    assert sorted(p.name for p in run.iterdir()) == before  # nothing planted in the run


@pytest.mark.slow
def test_command_line_lists_are_read_as_yaml_reads_them(tmp_path):
    """Snakemake reads `--config seeds=[0,1]` as ['0', '1']: accepted as seeds 0 and 1, and a
    negative seed gets the schema's own message, not a type error."""
    counts = job_counts(snakemake("-n", "reproduce", "--config", "seeds=[0,1]", tmp=tmp_path).stdout)
    assert counts["train"] == 2 * len(expected_runs({**study_config(), "seeds": [0]}))
    proc = snakemake("-n", "reproduce", "--config", "seeds=[-1]", tmp=tmp_path, check=False)
    assert proc.returncode != 0 and "config: seeds.0: -1 is less than the minimum of 0" in proc.stdout + proc.stderr


@pytest.mark.slow
def test_a_broken_line_in_a_finished_run_stops_the_analysis_before_any_job(tmp_path):
    import shutil

    for folder in ("results", "figures"):
        shutil.copytree(REPO / folder, tmp_path / folder, ignore=shutil.ignore_patterns("logs", "checkpoint", "local"))
    evals = tmp_path / "results/runs/arith/cpu/grpo-n16-m16/seed1/evals.jsonl"
    lines = evals.read_text().splitlines(keepends=True)
    evals.write_text("".join([lines[0], '{"step": 33, "broken\n', *lines[2:]]))
    proc = snakemake("-n", "reproduce", tmp=tmp_path, check=False)
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "Job stats" not in text
    assert f"RunFileError: {evals}:2: not valid JSON" in text
