"""Live tracking (report_to): what the trackers receive equals what the JSONL files hold."""
import importlib.util
import json
import os
from pathlib import Path

import pytest

import pods.training.tracking
from helpers import config, run_at
from pods.runs import read_jsonl
from pods.training.config import load_train_config
from pods.training.trainer import train
from pods.vocabulary import RUN_LAYOUT

RUN_NAME = RUN_LAYOUT.format(benchmark="first_digit", hardware="cpu", method="grpo-n4-m4", seed=0)

pytestmark = pytest.mark.usefixtures("toy_task")


def tensorboard_scalars(folder):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder), size_guidance={"scalars": 0}).Reload()
    return {tag: [(e.step, e.value, e.wall_time) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def wandb_records(path):
    """The protobuf records of a W&B run file (`run-<id>.wandb`). W&B's Python reader of its own
    transaction log is gone from the SDK, so this reads its container, LevelDB's log format: a
    7-byte file header (":W&B", magic, version), then 32 KiB blocks of chunks, each with a 7-byte
    header (crc32, length, type: 1 whole, 2 first, 3 middle, 4 last)."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B", path
    pos, block, chunks = 7, 32768, b""
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # a block's tail too short for a header is padding
            pos += left
            continue
        length, kind = int.from_bytes(data[pos + 4:pos + 6], "little"), data[pos + 6]
        chunks += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(chunks)
            yield record
            chunks = b""


def assert_curves_equal_records(curves, prefix, records):
    for key in pods.training.tracking.scalars(records[0]):
        points = curves[f"{prefix}/{key}"]
        assert [step for step, _, _ in points] == [r["step"] for r in records], key
        assert [value for _, value, _ in points] == pytest.approx([float(r[key]) for r in records], rel=1e-6), key
        # the training clock is the horizontal axis beside the step
        assert [clock for _, _, clock in points] == pytest.approx([r["train_time_s"] for r in records], abs=1e-6)


@pytest.mark.skipif(importlib.util.find_spec("tensorboard") is None,
                    reason="tensorboard not installed (the track extra)")
def test_tensorboard_curves_equal_the_jsonl_and_resume_continues_them(base, tmp_path):
    run = run_at(tmp_path / "results" / "study" / "runs", "first_digit", "cpu", "grpo-n4-m4", 0)
    cfg = config(base, run, "n=4", "m=4", "max_steps=3", "eval_every_steps=2", "checkpoint_every_s=0",
                 "report_to=[tensorboard]")
    train(cfg, progress_bar=False)
    # a larger budget continues the run: the same event folder, no second one
    train(config(base, run, "n=4", "m=4", "max_steps=5", "eval_every_steps=2", "checkpoint_every_s=0",
                 "report_to=[tensorboard]"), progress_bar=False)
    steps = read_jsonl(run / "steps.jsonl", finished=True)
    evals = read_jsonl(run / "evals.jsonl", finished=True)
    assert [r["step"] for r in steps] == [1, 2, 3, 4, 5] and [r["step"] for r in evals] == [0, 2, 3, 4, 5]
    curves = tensorboard_scalars(run / "tracking" / "tensorboard")
    assert {"train/generate_s", "train/update_s", "train/reward_mean", "train/step_s", "train/tokens_generated",
            "eval/accuracy"} <= set(curves)
    assert_curves_equal_records(curves, "train", steps)
    throughput = [value for _, value, _ in curves["train/tokens_generated_per_s"]]
    assert throughput == pytest.approx([r["tokens_generated"] / r["step_s"] for r in steps], rel=1e-5)
    assert_curves_equal_records(curves, "eval", evals)


@pytest.mark.skipif(importlib.util.find_spec("wandb") is None, reason="wandb not installed (the track extra)")
def test_wandb_offline_run_folder_holds_the_same_keys(base, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    run = run_at(tmp_path / "results" / "study" / "runs", "first_digit", "cpu", "grpo-n4-m4", 0)
    train(config(base, run, "n=4", "m=4", "max_steps=2", "eval_every_steps=1", "report_to=[wandb]"),
          progress_bar=False)
    run_id = (run / "tracking" / "wandb-id").read_text().strip()
    [folder] = (run / "tracking" / "wandb").glob(f"offline-run-*-{run_id}")
    history, run_record = [], None
    for record in wandb_records(folder / f"run-{run_id}.wandb"):
        if record.WhichOneof("record_type") == "history":
            history.append({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                            for item in record.history.item})
        elif record.WhichOneof("record_type") == "run":
            run_record = record.run
    assert run_record.display_name == RUN_NAME and run_record.run_group == str(tmp_path / "results/study")
    config_keys = {item.key for item in run_record.config.update}
    assert {"config", "provenance", "hardware"} <= config_keys
    steps = read_jsonl(run / "steps.jsonl", finished=True)
    evals = read_jsonl(run / "evals.jsonl", finished=True)
    logged_steps = [h for h in history if "train/step" in h]
    logged_evals = [h for h in history if "eval/step" in h]
    assert len(logged_steps) == len(steps) and len(logged_evals) == len(evals)
    for logged, records, prefix in ((logged_steps, steps, "train"), (logged_evals, evals, "eval")):
        for h, r in zip(logged, records):
            logged_keys = {k for k in h if k.startswith(prefix)}
            expected = {f"{prefix}/{k}" for k in ["step", *pods.training.tracking.scalars(r)]}
            assert expected <= logged_keys and all(k.endswith("_per_s") for k in logged_keys - expected)
            assert all(h[f"{prefix}/{k}"] == pytest.approx(v) for k, v in pods.training.tracking.scalars(r).items())


@pytest.mark.skipif(importlib.util.find_spec("trackio") is None, reason="trackio not installed (the track extra)")
def test_trackio_local_project_holds_the_same_points_and_resume_continues_the_run(base, tmp_path, monkeypatch):
    import subprocess
    import sys
    import textwrap

    # trackio fixes its folder when it is imported: a child process with TRACKIO_DIR set
    run = run_at(tmp_path / "results" / "study" / "runs", "first_digit", "cpu", "grpo-n4-m4", 0)
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r})
        import pods.training.tasks
        from helpers import FirstDigit, config
        from pods.training.trainer import train
        pods.training.tasks.TASKS["first_digit"] = FirstDigit
        for steps in (2, 3):  # the second start resumes the run (and its trackio run)
            train(config({str(base)!r}, {str(run)!r}, "n=4", "m=4", f"max_steps={{steps}}", "eval_every_steps=1",
                         "checkpoint_every_s=0", "report_to=[trackio]"), progress_bar=False)
    """))
    env = dict(os.environ, TRACKIO_DIR=str(tmp_path / "trackio"), TRACKIO_PROJECT="pods-test")
    result = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    reader = textwrap.dedent(f"""
        import json, sys
        from trackio.sqlite_storage import SQLiteStorage
        print(json.dumps(SQLiteStorage.get_logs("pods-test", "{RUN_NAME}")))
    """)
    logs = json.loads(subprocess.run([sys.executable, "-c", reader], env=env, capture_output=True, text=True,
                                     check=True).stdout.splitlines()[-1])
    steps = read_jsonl(run / "steps.jsonl", finished=True)
    evals = read_jsonl(run / "evals.jsonl", finished=True)
    assert [r["step"] for r in steps] == [1, 2, 3]
    for prefix, records in (("train", steps), ("eval", evals)):
        for record in records:
            points = [log for log in logs if f"{prefix}/train_time_s" in log and log["step"] == record["step"]]
            assert len(points) == 1, (prefix, record["step"])
            assert all(points[0][f"{prefix}/{k}"] == pytest.approx(v) for k,
                       v in pods.training.tracking.scalars(record).items())


def test_bad_or_missing_report_to_is_refused_at_parse_time(monkeypatch):
    with pytest.raises(ValueError, match=r"config key 'report_to': 'mlflow' is not one of tensorboard, wandb, trackio"):
        load_train_config(None, ["report_to=[tensorboard, mlflow]"])
    with pytest.raises(ValueError, match=r"config key 'report_to' must be list"):
        load_train_config(None, ["report_to={a: 1}"])
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "trackio" else real(name, *a))
    with pytest.raises(ValueError, match=r"'trackio' needs the trackio package: pip install -e '\.\[track\]'"):
        load_train_config(None, ["report_to=[trackio]"])
    assert load_train_config(None, []).report_to == []
