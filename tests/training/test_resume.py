"""Kill -9 and resume: the resumed run's eval curve and token counts equal an uninterrupted run's."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from helpers import FirstDigit
from pods.runs import RunFileError, append_jsonl, read_jsonl, truncate_jsonl

TESTS = Path(__file__).resolve().parents[1]  # the tests folder (helpers.py, conftest.py)

# The run is driven through the real CLI in a child process, with the toy task of helpers.py.
SCRIPT = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {tests!r})
    import pods.training.tasks
    from helpers import FirstDigit
    pods.training.tasks.TASKS["first_digit"] = FirstDigit
    from pods.cli import main
    sys.exit(main(["train", *sys.argv[1:]]))
    """
)

ARGS = [
    "benchmark=first_digit", "n=8", "m=4", "rule=max_variance", "prompts_per_step=4", "max_new_tokens=4",
    "lr=3e-3", "max_steps=15", "max_train_time_s=null", "eval_every_s=null", "eval_every_steps=3",
    "checkpoint_every_s=0",  # a checkpoint after every step: the kill lands just after one
]
STEP_KEYS = ("step", "rollouts_generated", "rollouts_trained", "tokens_generated", "tokens_trained",
             "reward_mean", "zero_variance_frac", "loss", "grad_norm")
EVAL_KEYS = ("step", "accuracy", "mean_length", "n_items")


def command(script, base, run_dir):
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", OMP_NUM_THREADS="1")
    return [sys.executable, str(script), f"base_model={base}", f"run_dir={run_dir}", *ARGS], env


ENGINES = {"torch": [], "lora": ["update_engine=lora", "lora_rank=4", "lora_alpha=8", "load_in_4bit=false"]}


@pytest.fixture(scope="module")
def straight(base, tmp_path_factory):
    """The uninterrupted reference run of each engine, trained once in this process (same code,
    same single thread) when a test first asks for it."""
    import pods.training.tasks
    from pods.training.config import load_train_config
    from pods.training.trainer import train

    done = {}

    def run(engine: str) -> Path:
        if engine not in done:
            run_dir = tmp_path_factory.mktemp("straight") / engine
            added = "first_digit" not in pods.training.tasks.TASKS
            if added:
                pods.training.tasks.TASKS["first_digit"] = FirstDigit
            try:
                train(load_train_config(None, [f"base_model={base}", f"run_dir={run_dir}", *ARGS, *ENGINES[engine]]),
                      progress_bar=False)
            finally:
                if added:
                    del pods.training.tasks.TASKS["first_digit"]
            done[engine] = run_dir
        return done[engine]

    return run


@pytest.mark.slow
@pytest.mark.parametrize("engine, stop", [("torch", signal.SIGKILL), ("lora", signal.SIGKILL), ("torch",
                                                                                                signal.SIGTERM),
                                          ("torch", signal.SIGINT)],
                         ids=["torch-kill9", "lora-kill9", "torch-sigterm", "torch-ctrl-c"])
def test_stopped_run_resumes_to_the_uninterrupted_curve(base, straight, tmp_path, engine, stop):
    """kill -9 (no warning: the last regular checkpoint), SIGTERM (SLURM's time limit or
    preemption: the step finishes, a checkpoint, `interrupted`, exit 75) and Ctrl-C (SIGINT: the
    same, exit 130, one line and no traceback) all resume exactly."""
    script = tmp_path / "run_train.py"
    script.write_text(SCRIPT.format(tests=str(TESTS)))
    reference = straight(engine)

    cmd, env = command(script, base, tmp_path / "stopped")
    cmd += ENGINES[engine]
    steps_file = tmp_path / "stopped" / "steps.jsonl"
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        while len(read_jsonl(steps_file, finished=False)) < 6:
            assert proc.poll() is None, "the run ended before it could be stopped"
            time.sleep(0.01)
        proc.send_signal(stop)
        _, stderr = proc.communicate(timeout=300)
    finally:
        proc.kill()
        proc.wait()
    stopped_at = len(read_jsonl(steps_file, finished=False))
    assert stopped_at < 15
    if stop == signal.SIGKILL:
        assert proc.returncode == -signal.SIGKILL
    else:
        from pods.runs import RunInterrupted

        name = signal.Signals(stop).name
        assert proc.returncode == RunInterrupted.EXIT_CODES[name] == {"SIGTERM": 75,
                                                                      "SIGINT": 130}[name], stderr[-2000:]
        assert f"pods train: interrupted: {tmp_path / 'stopped'}: {name}; stopped after step {stopped_at}" in stderr
        assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr
        summary = json.loads((tmp_path / "stopped" / "summary.json").read_text())
        assert summary["status"] == "interrupted" and summary["steps"] == stopped_at

    result = subprocess.run(cmd, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "resuming at step" in result.stdout

    def pick(path, keys):
        return [{k: r[k] for k in keys} for r in read_jsonl(path, finished=True)]

    resumed = tmp_path / "stopped"
    assert pick(resumed / "evals.jsonl", EVAL_KEYS) == pick(reference / "evals.jsonl", EVAL_KEYS)
    assert pick(resumed / "steps.jsonl", STEP_KEYS) == pick(reference / "steps.jsonl", STEP_KEYS)
    assert [e["step"] for e in read_jsonl(resumed / "evals.jsonl", finished=True)] == list(range(0, 16, 3))
    assert len({s["loss"] for s in read_jsonl(reference / "steps.jsonl", finished=True)}) > 1  # the run trains
    # training time keeps counting from the checkpoint instead of restarting at 0
    times = [s["train_time_s"] for s in read_jsonl(resumed / "steps.jsonl", finished=True)]
    assert times == sorted(times)
    assert json.loads((resumed / "summary.json").read_text())["status"] == "complete"


def test_jsonl_reader_drops_a_torn_last_line_on_resume_refuses_it_when_finished_and_truncation_is_exact(tmp_path):
    path = tmp_path / "x.jsonl"
    assert read_jsonl(path, finished=False) == []  # a log not written yet
    with pytest.raises(FileNotFoundError):
        read_jsonl(path, finished=True)
    for step in range(5):
        append_jsonl(path, {"step": step})
    with open(path, "a") as f:
        f.write('{"step": 5, "acc')  # a write cut short by a crash
    assert [r["step"] for r in read_jsonl(path, finished=False)] == [0, 1, 2, 3, 4]
    with pytest.raises(RunFileError, match=r"x\.jsonl:6: the last line is cut short"):
        read_jsonl(path, finished=True)
    assert truncate_jsonl(path, lambda r: r["step"] <= 2) == 3
    assert path.read_text() == '{"step": 0}\n{"step": 1}\n{"step": 2}\n'
    append_jsonl(path, {"step": 3})
    assert [r["step"] for r in read_jsonl(path, finished=True)] == [0, 1, 2, 3]
    with open(path, "a") as f:
        f.write('{"step": 4, "acc\n')  # a complete line that is not JSON is never skipped
    with pytest.raises(RunFileError, match=r"x\.jsonl:5: not valid JSON"):
        read_jsonl(path, finished=False)


@pytest.mark.slow
def test_two_processes_train_and_resume(base, tmp_path):
    """torchrun, 2 processes, deepspeed ZeRO-2 on CPU (gloo): generation sharded, update gathered,
    and a second start resumes from DeepSpeed's partitioned checkpoint."""
    import importlib.util

    if importlib.util.find_spec("deepspeed") is None:  # installed but broken: a failure, not a skip
        pytest.skip("deepspeed is not installed (it is in the dev extra)")
    import socket

    script = tmp_path / "run_train.py"
    script.write_text(SCRIPT.format(tests=str(TESTS)))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    run_dir = tmp_path / "run"
    for max_steps in (4, 6):  # the second start resumes from the first one's checkpoints
        cmd, env = command(script, base, run_dir)
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", f"--master_port={port}",
               *cmd[1:], "update_engine=deepspeed", "deepspeed_zero_stage=2", f"max_steps={max_steps}"]
        result = subprocess.run(cmd, env=env, capture_output=True, text=True)
        assert result.returncode == 0, result.stderr[-3000:]
    assert "2 processes | resuming at step 4" in result.stdout
    steps = read_jsonl(run_dir / "steps.jsonl", finished=True)
    assert [s["step"] for s in steps] == [1, 2, 3, 4, 5, 6]
    # counts are the whole step's, summed over both processes
    assert {(s["rollouts_generated"], s["rollouts_trained"]) for s in steps} == {(4 * 8, 4 * 4)}
    names = sorted(p.name for p in (run_dir / "checkpoint").iterdir())
    assert names[:3] == ["deepspeed", "state-rank0.json", "state-rank1.json"] and len(names) == 5, names
    assert names[3].startswith("tensors-rank0-") and names[4].startswith("tensors-rank1-")
    # DeepSpeed's loader unpickles its own files: each was checked against the manifest first
    assert "DeepSpeed's load_checkpoint unpickles its own files; each matched the sha256" in result.stdout
    manifest = json.loads((run_dir / "checkpoint" / "state-rank1.json").read_text())
    tag = manifest["state"]["engine"]["deepspeed_tag"]
    listed = {name for name in manifest["files"] if name.startswith(f"deepspeed/{tag}/")}
    assert listed and listed == {str(p.relative_to(run_dir / "checkpoint"))
                                 for p in (run_dir / "checkpoint" / "deepspeed" / tag).rglob("*") if p.is_file()}
    evals = read_jsonl(run_dir / "evals.jsonl", finished=True)
    assert [e["step"] for e in evals] == [0, 3, 4, 6] and all(e["n_items"] == 64 for e in evals)


def test_ctrl_c_asks_for_a_stop_after_the_step_and_a_second_one_stops_at_once(tmp_path, capsys):
    from pods.training.rundir import RunDirectory

    run = RunDirectory.__new__(RunDirectory)  # the handler's state only; no run is opened
    run.path, run.stop_signal, run.preemption_requested = tmp_path, None, False
    run._request_stop(signal.SIGINT, None)
    assert run.preemption_requested and run.stop_signal == "SIGINT"
    assert "Ctrl-C again: at once" in capsys.readouterr().err
    with pytest.raises(KeyboardInterrupt):
        run._request_stop(signal.SIGINT, None)
