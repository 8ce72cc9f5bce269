"""One quick run in a fresh clone: `pods train max_steps=20` builds the embedded benchmark's
missing default base first (the workflow's warm start, in a process of its own on the study's CPU
kernels), says so in one line, and trains from it into the git-ignored results/local."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from helpers import save_tiny_base
from pods import cli

REPO = Path(__file__).resolve().parents[2]
QUICK = ["max_steps=1", "n=4", "m=4", "prompts_per_step=2", "max_new_tokens=4", "eval_items=4", "eval_every_s=null",
         "checkpoint_every_s=1000"]
RUN = "results/local/runs/arith/cpu/grpo-n4-m4/seed0"
NOTICE = ("pods train: no base model at models/arith/base yet: building it first, as the workflow does (1-2 minutes "
          "on one core): ATEN_CPU_CAPABILITY=avx2 pods warmstart benchmark=arith out_dir=models/arith/base")


@pytest.fixture
def warm_starts(tmp_path, monkeypatch):
    """`pods warmstart` as the trainer starts it, recorded; `built` says whether it leaves a base."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
    record, real_run = SimpleNamespace(calls=[], built=True), subprocess.run

    def run(argv, *args, **kwargs):
        if "warmstart" not in argv:
            return real_run(argv, *args, **kwargs)
        record.calls.append((argv, kwargs.get("env") or {}))
        if record.built:
            save_tiny_base(Path(next(a for a in argv if a.startswith("out_dir="))[len("out_dir="):]))
        return subprocess.CompletedProcess(argv, 0 if record.built else 1)

    monkeypatch.setattr(subprocess, "run", run)
    return record


def test_pods_train_builds_the_missing_default_base_first_then_trains_from_it(warm_starts, tmp_path, capsys):
    assert cli.main(["train", "--no-progress", *QUICK]) == 0
    assert capsys.readouterr().err.splitlines()[0] == NOTICE
    [(argv, env)] = warm_starts.calls
    assert argv[1:] == ["-m", "pods.cli", "warmstart", "benchmark=arith", "out_dir=models/arith/base", "--no-progress"]
    assert env["ATEN_CPU_CAPABILITY"] == "avx2"
    summary = json.loads((tmp_path / RUN / "summary.json").read_text())
    assert summary["status"] == "complete" and summary["steps"] == 1
    assert cli.main(["train", "--no-progress", *QUICK]) == 0  # finished: nothing built or trained again
    assert len(warm_starts.calls) == 1 and "finished already" in capsys.readouterr().out


def test_a_warm_start_that_fails_stops_the_run_in_one_line(warm_starts, tmp_path, capsys):
    warm_starts.built = False
    assert cli.main(["train", "--no-progress", *QUICK]) == 2
    assert capsys.readouterr().err.splitlines() == [NOTICE, (
        "pods train: error: base_model: building models/arith/base failed (pods warmstart exited 1, its error "
        "above); build it by hand as the workflow does: ATEN_CPU_CAPABILITY=avx2 pods warmstart benchmark=arith "
        "out_dir=models/arith/base")]
    assert not (tmp_path / "results").exists()


def test_a_base_the_package_cannot_build_is_refused_without_building(warm_starts, tmp_path, capsys):
    assert cli.main(["train", "--no-progress", "benchmark=gsm8k", *QUICK]) == 2
    assert capsys.readouterr().err == (
        "pods train: error: base_model: no model folder at models/gsm8k/base (the folder does not exist); check the "
        "path, or set base_model to a model folder (save_pretrained layout) or a hub id (owner/name)\n")
    assert warm_starts.calls == [] and not (tmp_path / "results").exists()


@pytest.mark.slow
def test_the_quick_run_from_a_fresh_folder_end_to_end(tmp_path):
    """The real warm start (about 80 s on one core) and two steps, as a newcomer types it."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("ATEN_CPU_CAPABILITY", None)
    proc = subprocess.run([sys.executable, "-m", "pods.cli", "train", "--no-progress", "max_steps=2", "eval_items=50"],
                          cwd=tmp_path, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr.splitlines()[0] == NOTICE
    record = json.loads((tmp_path / "models/arith/base/warmstart.json").read_text())
    assert record["environment"]["cpu_capability"] == "AVX2"
    summary = json.loads((tmp_path / "results/local/runs/arith/cpu/grpo-n16-m16/seed0/summary.json").read_text())
    assert summary["status"] == "complete" and summary["steps"] == 2
