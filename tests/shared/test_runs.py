"""Run files are never lost, never shared by two writers, and never analysed when they are wrong."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from helpers import TOY, pods_train, run_at
from pods import cli, runs
from pods.runs import read_jsonl
from pods.study.curves import find_runs
from pods.vocabulary import RUN_LAYOUT, run_path

TESTS = Path(__file__).resolve().parents[1]  # the tests folder (helpers.py, conftest.py)
REPO = TESTS.parent
COMMITTED = REPO / "results"
COMMITTED_RUN = run_at(COMMITTED / "runs", "arith", "cpu", "grpo-n16-m16", 0)

pytestmark = pytest.mark.usefixtures("toy_task")

# `pods train` in a child process, with the toy task of helpers.py registered
CHILD = textwrap.dedent(
    """
    import os, sys, time
    sys.path.insert(0, {tests!r})
    import pods.training.tasks
    from helpers import FirstDigit

    class SlowFirstDigit(FirstDigit):
        # a step that takes a while, so that a second trainer usually finds the first still at work
        def reward(self, completion, problem):
            time.sleep(float(os.environ.get("REWARD_SLEEP_S", "0")))
            return super().reward(completion, problem)

    pods.training.tasks.TASKS["first_digit"] = SlowFirstDigit
    from pods.cli import main
    sys.exit(main(["train", "--no-progress", *sys.argv[1:]]))
    """
)


def snapshot(folder: Path) -> dict:
    """Every file under `folder` with its bytes and modification time."""
    return {str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file()}


def child(tmp_path, base, run_dir, *extra):
    script = tmp_path / "child_train.py"
    script.write_text(CHILD.format(tests=str(TESTS)))
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", OMP_NUM_THREADS="1")
    return [sys.executable, str(script), f"base_model={base}", f"run_dir={run_dir}", *TOY, *extra], env


# --------------------------------------------------------------------------------------------
# 1. A finished run is never rewritten
# --------------------------------------------------------------------------------------------
def test_a_finished_run_is_left_untouched(base, tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert pods_train(base, run_dir, "max_steps=4") == 0
    before = snapshot(run_dir)
    assert pods_train(base, run_dir, "max_steps=4") == 0
    assert "finished already (4 steps" in capsys.readouterr().out
    assert snapshot(run_dir) == before
    # a larger budget still extends it, from its checkpoint
    assert pods_train(base, run_dir, "max_steps=6") == 0
    assert runs.read_run(_as_run_path(tmp_path, run_dir)).summary["steps"] == 6


def test_a_committed_run_is_refused_whatever_the_command(tmp_path, capsys):
    """The committed runs carry no checkpoint: the trainer must not take them for a failed start."""
    copy = run_at(tmp_path / "runs", "arith", "cpu", "grpo-n16-m16", 0)
    # as a clone has it: a checkout that trained the study itself also holds the (ignored) checkpoint
    shutil.copytree(COMMITTED_RUN, copy, ignore=shutil.ignore_patterns("checkpoint"))
    before = snapshot(copy)
    config = copy / "config.yaml"
    # the run's own config (its base model is not even on this machine): nothing to do
    assert cli.main(["train", "--no-progress", "--config", str(config), f"run_dir={copy}"]) == 0
    assert "finished already" in capsys.readouterr().out
    # another budget, or another config: refused in one line, nothing written
    for args, message in ((["max_train_time_s=360"], "without the checkpoint a larger budget would continue"),
                          (["lr=3e-4"], "holds a finished run with lr=0.0001, not 0.0003")):
        assert cli.main(["train", "--no-progress", "--config", str(config), f"run_dir={copy}", *args]) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and len(err.splitlines()) == 1, err
    assert snapshot(copy) == before


def test_pods_train_on_its_own_writes_outside_the_committed_study():
    from pods.training.config import load_train_config

    out = load_train_config(REPO / "config" / "train-cpu.yaml").output_dir()
    assert out.parts[:2] == ("results", "local")
    ignored = subprocess.run(["git", "check-ignore", "-q", str(out / "steps.jsonl")], cwd=REPO)
    assert ignored.returncode == 0, f"{out} is not git-ignored"


def test_files_without_a_checkpoint_are_refused_unless_restarted(base, tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert pods_train(base, run_dir, "max_steps=3") == 0
    shutil.rmtree(run_dir / "checkpoint")
    summary = json.loads((run_dir / "summary.json").read_text())
    (run_dir / "summary.json").write_text(json.dumps({**summary, "status": "running"}))
    before = snapshot(run_dir)
    capsys.readouterr()
    assert pods_train(base, run_dir, "max_steps=3") == 2
    err = capsys.readouterr().err.strip()
    assert "holds steps.jsonl, evals.jsonl, summary.json (status running) but no checkpoint" in err
    assert "--restart" in err and len(err.splitlines()) == 1
    assert snapshot(run_dir) == before
    assert pods_train(base, run_dir, "max_steps=3", "--restart") == 0
    assert [s["step"] for s in runs.read_run(_as_run_path(tmp_path, run_dir)).steps] == [1, 2, 3]


# --------------------------------------------------------------------------------------------
# 2. One writer per run
# --------------------------------------------------------------------------------------------
def test_a_second_writer_fails_at_once_naming_the_holder(base, tmp_path, capsys):
    run_dir = tmp_path / "run"
    with runs.RunLock(run_dir):
        assert pods_train(base, run_dir, "max_steps=2") == 2
        err = capsys.readouterr().err.strip()
        assert f"is being written by pid {os.getpid()} on host" in err and len(err.splitlines()) == 1
        assert not (run_dir / "steps.jsonl").exists()
    assert not (run_dir / runs.LOCK_FILE).exists()  # released and removed
    assert pods_train(base, run_dir, "max_steps=2") == 0


def test_a_lock_left_by_a_killed_process_is_taken_over(tmp_path):
    run_dir = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import time
        from pods.runs import RunLock
        RunLock({str(run_dir)!r}).acquire()
        print("locked", flush=True)
        time.sleep(600)
    """)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(runs.RunDirError, match=f"pid {holder.pid} on host"):
            runs.RunLock(run_dir).acquire()
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        lock = runs.RunLock(run_dir).acquire()  # the kernel dropped the dead holder's flock
        assert lock.previous["pid"] == holder.pid
        lock.release()
    finally:
        holder.kill()


@pytest.mark.slow
def test_two_trainers_racing_for_one_run_directory(base, tmp_path):
    """Started together, one trains and the other is refused, or (when the first was done before the
    second looked) finds the run finished; never do both write it."""
    run_dir = tmp_path / "run"
    cmd, env = child(tmp_path, base, run_dir, "max_steps=6")
    env["REWARD_SLEEP_S"] = "0.01"  # 32 rewards a step: about 2 s of training in all
    procs = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    results = [(p.wait(), *p.communicate()) for p in procs]
    codes = sorted(code for code, _, _ in results)
    finished_already = [out for code, out, _ in results if code == 0 and "finished already (6 steps" in out]
    if codes == [0, 2]:
        loser = next(err for code, _, err in results if code == 2)
        assert "is being written by pid" in loser and len(loser.strip().splitlines()) == 1
        assert not finished_already, results
    else:  # the second trainer only looked once the first had released the finished run
        assert codes == [0, 0] and len(finished_already) == 1, results
    run = runs.read_run(_as_run_path(tmp_path, run_dir))
    assert [s["step"] for s in run.steps] == [1, 2, 3, 4, 5, 6]
    assert [e["step"] for e in run.evals] == [0, 2, 4, 6]


@pytest.mark.slow
def test_kill_9_and_rerun_takes_the_lock_over_and_resumes(base, tmp_path):
    run_dir = tmp_path / "run"
    cmd, env = child(tmp_path, base, run_dir, "max_steps=12")
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while len(read_jsonl(run_dir / "steps.jsonl", finished=False)) < 4:
            assert proc.poll() is None
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    rerun = subprocess.run(cmd, env=env, capture_output=True, text=True)
    assert rerun.returncode == 0, rerun.stderr
    assert f"taking over the lock left by pid {proc.pid}" in rerun.stdout
    assert "resuming at step" in rerun.stdout
    run = runs.read_run(_as_run_path(tmp_path, run_dir))
    assert [s["step"] for s in run.steps] == list(range(1, 13))


def _as_run_path(tmp_path: Path, run_dir: Path) -> Path:
    """The run under a runs/{benchmark}/{hardware}/{method}/seed{k} path, as readers expect."""
    target = run_at(tmp_path / "runs", "first_digit", "cpu", "pods-max_variance-n8-m4", 0)
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(run_dir, target, ignore=shutil.ignore_patterns("checkpoint"))
    return target


# --------------------------------------------------------------------------------------------
# 3. Analysis validates what it reads
# --------------------------------------------------------------------------------------------
@pytest.fixture
def results_copy(tmp_path):
    copy = tmp_path / "results"
    shutil.copytree(COMMITTED / "runs", copy / "runs", ignore=shutil.ignore_patterns("checkpoint"))
    shutil.copy(COMMITTED / "study.yaml", copy / "study.yaml")
    return copy


def edit_line(path: Path, lineno: int, **changes) -> None:
    lines = path.read_text().splitlines(keepends=True)
    record = json.loads(lines[lineno - 1])
    record.update(changes)
    lines[lineno - 1] = json.dumps(record) + "\n"
    path.write_text("".join(lines))


def analyze(results, capsys):
    rc = cli.main(["analyze", "--runs", str(results), "--study", str(results / "study.yaml"),
                   "--out", str(results / "summary.csv"), "--n-boot", "200"])
    return rc, capsys.readouterr().err.strip()


def test_the_committed_runs_read_as_valid_results():
    for run_dir in find_runs(COMMITTED):
        run = runs.read_run(run_dir)
        assert run.summary["status"] == "complete" and run.steps and run.evals


RUN = run_path("runs", benchmark="arith", hardware="cpu", method="grpo-n16-m16", seed=0)


@pytest.mark.parametrize("corrupt, message", [
    (lambda r: edit_line(r / "evals.jsonl", 3, accuracy=1.5),
     r"evals.jsonl:3: accuracy must be a finite number in \[0, 1\], got 1.5"),
    (lambda r: edit_line(r / "evals.jsonl", 2, accuracy=float("nan")),
     r"evals.jsonl:2: accuracy must be a finite number in \[0, 1\], got nan"),
    (lambda r: (r / "evals.jsonl").write_text(""), r"evals.jsonl: no evaluations"),
    (lambda r: edit_line(r / "evals.jsonl", 4, step=1), r"evals.jsonl:4: steps must strictly increase"),
    (lambda r: edit_line(r / "evals.jsonl", 1, step=3, train_time_s=1.0),
     r"evals.jsonl:1: the first 'test' evaluation must be the base model's"),
    (lambda r: (r / "evals.jsonl").write_text((r / "evals.jsonl").read_text().splitlines(keepends=True)[0]),
     r"'test' has only the base evaluation"),
    (lambda r: edit_line(r / "evals.jsonl", 5, train_time_s=1.0), r"evals.jsonl:5: train_time_s must not decrease"),
    (lambda r: edit_line(r / "steps.jsonl", 7, step=6), r"steps.jsonl:7: expected step 7, got 6"),
    (lambda r: edit_line(r / "steps.jsonl", 9, train_time_s=0.5),
     r"steps.jsonl:9: train_time_s must be finite and not decrease"),
    (lambda r: (r / "summary.json").write_text(json.dumps({**json.loads((r / "summary.json").read_text()),
                                                           "peak_accuracy": 0.9})),
     r"summary.json: peak_accuracy is 0.9 but evals.jsonl gives"),
    (lambda r: (r / "summary.json").write_text(json.dumps({**json.loads((r / "summary.json").read_text()),
                                                           "status": "running"})),
     r"summary.json: status is 'running'"),
    (lambda r: (r / "summary.json").write_text(json.dumps({**json.loads((r / "summary.json").read_text()), "n": 64})),
     r"summary.json: n is 64 but the method grpo-n16-m16 says 16"),
    (lambda r: (r / "evals.jsonl").write_text((r / "evals.jsonl").read_text()[:-1]),
     r"evals.jsonl:\d+: the last line is cut short"),
])
def test_analysis_stops_on_a_broken_run_naming_file_line_and_rule(results_copy, capsys, corrupt, message):
    import re

    corrupt(results_copy / RUN)
    rc, err = analyze(results_copy, capsys)
    assert rc == 2 and re.search(message, err), err
    assert len(err.splitlines()) == 1 and RUN in err
    assert not (results_copy / "summary.csv").exists()


def test_interleaved_writers_are_caught(results_copy, capsys):
    """What two trainers appending to one run directory leave behind (steps 1, 2, 1, 3, ...)."""
    steps = results_copy / RUN / "steps.jsonl"
    lines = steps.read_text().splitlines(keepends=True)
    steps.write_text("".join(lines[:2] + lines[:1] + lines[2:]))
    rc, err = analyze(results_copy, capsys)
    assert rc == 2 and "steps.jsonl:3: expected step 3, got 1" in err and "second writer" in err


def test_the_paper_importer_checks_the_authors_files_too(tmp_path, capsys):
    release = REPO.parent / "shared" / "paper-results"
    if not release.is_dir():
        message = "the authors' released results are not beside the checkout (../shared/paper-results)"
        if os.environ.get("CI"):  # as tests/paper/test_paper.py: CI must provide them
            pytest.fail(message)
        pytest.skip(message)
    src = tmp_path / "release"
    src.mkdir()
    runs_files = (f"Instruct-MATH-NF-512-{s}-Run{k}.json" for s in ("8-8", "32-8") for k in range(1, 11))
    for name in ("base-qwen.json", *runs_files):
        shutil.copy(release / name, src / name)
    bad = src / "Instruct-MATH-NF-512-32-8-Run3.json"
    log = json.loads(bad.read_text())
    first = sorted(log, key=lambda k: int(k.split("-")[1]))[0]
    log[first]["math500"]["ans_acc"] = [1.5] * len(log[first]["math500"]["ans_acc"])
    bad.write_text(json.dumps(log))
    rc = cli.main(["paper", "import", "--src", str(src), "--out", str(tmp_path / "imported")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "accuracy must be a finite number in [0, 1], got 1.5" in err, err
    run = RUN_LAYOUT.format(benchmark="math", hardware="l40s-lora", method="pods-max_variance-n32-m8", seed=3)
    assert "Instruct-MATH-NF-512-32-8-Run3.json" in err and run in err


# --------------------------------------------------------------------------------------------
# 4. Bad values before compute; numerical failures recorded
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("value", ["inf", "nan", ".inf", "-.inf", "1e999"])
def test_non_finite_numbers_are_refused_at_parse_time(value, tmp_path, capsys):
    assert cli.main(["train", f"run_dir={tmp_path}/run", f"lr={value}"]) == 2
    err = capsys.readouterr().err.strip()
    assert "config key 'lr' must be a finite number" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "run").exists()


def test_a_diverging_run_stops_as_failed_and_keeps_its_last_good_checkpoint(base, tmp_path, capsys):
    run_dir = tmp_path / "run"
    # lr 1e30 without clipping: the first update is finite, the second meets the spoilt weights
    assert pods_train(base, run_dir, "lr=1e30", "max_grad_norm=0", "max_steps=10") == 1
    errors = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert len(errors) == 1 and errors[0].startswith("pods train: error: ")
    assert "stopped: non-finite" in errors[0] and "last good checkpoint (step 1)" in errors[0]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "failed"
    assert summary["failure"]["step"] == 2 and summary["failure"]["checkpoint_step"] == 1
    assert "non-finite" in summary["failure"]["reason"]
    assert [s["step"] for s in read_jsonl(run_dir / "steps.jsonl", finished=True)] == [1]
    import torch

    import pods.training.checkpoint as ckpt

    saved = ckpt.load(run_dir / "checkpoint", ckpt.read_manifest(run_dir / "checkpoint"))
    assert saved["progress"]["step"] == 1
    assert all(torch.isfinite(v).all() for v in saved["engine"]["model"].values() if v.is_floating_point())
    with pytest.raises(runs.RunFileError,
                       match="status is 'failed': non-finite.*delete the run's folder to train it again"):
        runs.check_summary(summary, read_jsonl(run_dir / "evals.jsonl", finished=True), [],
                           {"method": summary["method"]}, "summary.json")


def test_the_policy_refuses_to_sample_from_non_finite_logits(base):
    import torch

    from pods.training.models import load_policy
    from pods.training.rollout.hf import HFRolloutEngine

    model, tok = load_policy(base)
    with torch.no_grad():
        next(model.parameters()).fill_(float("nan"))
    with pytest.raises(FloatingPointError, match="logits are not finite"):
        HFRolloutEngine(model=model, tokenizer=tok).generate([[1, 2, 3]], 2, temperature=1.0, max_new_tokens=3)


# --------------------------------------------------------------------------------------------
# 5. What a newcomer meets first
# --------------------------------------------------------------------------------------------
def test_pods_help_imports_no_torch():
    code = ("import sys\nfrom pods.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "assert 'torch' not in sys.modules, 'pods --help imported torch'\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    for command in ("train", "warmstart", "analyze", "plot", "paper"):
        assert command in result.stdout


def test_pods_train_help_lists_every_config_key_with_its_default(capsys):
    import dataclasses

    from pods.training.config import TrainConfig

    with pytest.raises(SystemExit):
        cli.main(["train", "--help"])
    out = capsys.readouterr().out
    for f in dataclasses.fields(TrainConfig):
        assert f"  {f.name} = " in out, f.name
        assert f.metadata["help"].split()[0] in out
    assert "  n = 16  (int)" in out and "--restart" in out


@pytest.mark.slow
def test_without_a_terminal_the_trainer_prints_progress_lines(base, tmp_path):
    cmd, env = child(tmp_path, base, tmp_path / "run", "max_steps=4", "--log-every", "0")
    result = subprocess.run(cmd, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    progress = [line for line in result.stdout.splitlines() if line.startswith("step ") and "s/step" in line]
    assert [line.split(" | ")[0] for line in progress] == ["step 1", "step 2", "step 3", "step 4"]


def test_the_readme_selector_snippet_works_with_numpy():
    import numpy as np

    from pods.grpo import kept_advantages
    from pods.selection import select

    rewards = np.random.default_rng(0).random((3, 64))
    kept = select(rewards, m=16, rule="max_variance")
    advantages = kept_advantages(rewards, kept)
    assert isinstance(advantages, np.ndarray) and advantages.shape == (3, 16)
    chosen = np.take_along_axis(rewards, kept, axis=1)
    expected = (chosen - chosen.mean(1, keepdims=True)) / (chosen.std(1, ddof=1, keepdims=True) + 1e-4)
    np.testing.assert_allclose(advantages, expected)


def test_the_record_types_name_every_field_a_run_logs():
    """pods.runs.EvalRecord / StepRecord are the run schema in types: a committed run logs no field
    they lack, and has every field they require."""
    run = runs.read_run(COMMITTED_RUN)
    for records, kind in ((run.evals, runs.EvalRecord), (run.steps, runs.StepRecord)):
        for record in records:
            assert set(record) <= set(kind.__annotations__), set(record) - set(kind.__annotations__)
            assert kind.__required_keys__ <= set(record)
    assert {f"{phase}_s" for phase in runs.STEP_PHASES} <= set(runs.StepRecord.__annotations__)
