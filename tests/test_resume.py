"""Kill -9 and resume: the resumed run's eval curve and token counts equal an uninterrupted run's."""
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from pods.runs import RunFileError, append_jsonl, read_jsonl, truncate_jsonl

TESTS = Path(__file__).parent

# The run is driven through the real CLI in a child process, with the toy task of test_trainer.
SCRIPT = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {tests!r})
    import pods.tasks
    from test_trainer import FirstDigit
    pods.tasks.TASKS["first_digit"] = FirstDigit
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


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    from test_trainer import save_tiny_base

    return save_tiny_base(tmp_path_factory.mktemp("base"))


def command(script, base, run_dir):
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", OMP_NUM_THREADS="1")
    return [sys.executable, str(script), f"base_model={base}", f"run_dir={run_dir}", *ARGS], env


@pytest.mark.slow
def test_killed_run_resumes_to_the_uninterrupted_curve(base, tmp_path, monkeypatch):
    import pods.tasks
    from test_trainer import FirstDigit

    monkeypatch.setitem(pods.tasks.TASKS, "first_digit", FirstDigit)
    script = tmp_path / "run_train.py"
    script.write_text(SCRIPT.format(tests=str(TESTS)))

    # the uninterrupted reference runs in this process: same code, same single thread
    from pods.config import load_train_config
    from pods.trainer import train

    train(load_train_config(None, [f"base_model={base}", f"run_dir={tmp_path / 'straight'}", *ARGS]), progress_bar=False)

    cmd, env = command(script, base, tmp_path / "killed")
    steps_file = tmp_path / "killed" / "steps.jsonl"
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while len(read_jsonl(steps_file, finished=False)) < 6:
            assert proc.poll() is None, "the run ended before it could be killed"
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    killed_at = len(read_jsonl(steps_file, finished=False))
    assert killed_at < 15

    result = subprocess.run(cmd, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "resuming at step" in result.stdout

    def pick(path, keys):
        return [{k: r[k] for k in keys} for r in read_jsonl(path, finished=True)]

    straight, resumed = tmp_path / "straight", tmp_path / "killed"
    assert pick(resumed / "evals.jsonl", EVAL_KEYS) == pick(straight / "evals.jsonl", EVAL_KEYS)
    assert pick(resumed / "steps.jsonl", STEP_KEYS) == pick(straight / "steps.jsonl", STEP_KEYS)
    assert [e["step"] for e in read_jsonl(resumed / "evals.jsonl", finished=True)] == list(range(0, 16, 3))
    assert len({e["accuracy"] for e in read_jsonl(straight / "evals.jsonl", finished=True)}) > 1  # the curve moves
    # training time keeps counting from the checkpoint instead of restarting at 0
    times = [s["train_time_s"] for s in read_jsonl(resumed / "steps.jsonl", finished=True)]
    assert times == sorted(times)


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
    pytest.importorskip("deepspeed")
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
    assert sorted(p.name for p in (run_dir / "checkpoint").iterdir()) == ["deepspeed", "state-rank0.pt", "state-rank1.pt"]
    evals = read_jsonl(run_dir / "evals.jsonl", finished=True)
    assert [e["step"] for e in evals] == [0, 3, 4, 6] and all(e["n_items"] == 64 for e in evals)
