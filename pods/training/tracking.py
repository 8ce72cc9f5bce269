"""Live views of a run in the trackers researchers watch: TensorBoard, Weights & Biases, Trackio.

`report_to` (a TrainConfig key) names them. Every step record and every evaluation goes to each
as it is appended to `steps.jsonl` / `evals.jsonl` (the `train/` and `eval/` namespaces), with the
training clock beside the step; the run's config, provenance and hardware profile are the run's
metadata. The JSONL files stay the source of truth: nothing in the analysis reads a tracker, and
a tracker that fails to log is a lost curve, not a lost run.

Run name: the run directory's `{benchmark}/{hardware}/{method}/seed{seed}`; group: the study's
results folder above `runs/`. What a resumed run needs to continue the same tracker run is kept in
`tracking/` in the run directory: TensorBoard's event folder, the W&B run id and run folder.
Trackio continues the run of the same name in its project.

W&B and Trackio read their usual environment (WANDB_MODE=offline, WANDB_PROJECT, TRACKIO_DIR,
TRACKIO_PROJECT...); the project defaults to `pods`.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Mapping

FOLDER = "tracking"  # in the run directory
# TrainConfig keys that say where a run reports, not what it trains: a resumed run may change them
REPORTING_KEYS = ("report_to",)


def run_name(run_dir: Path) -> str:
    """`{benchmark}/{hardware}/{method}/seed{seed}`: the last four components of the run directory."""
    return "/".join(Path(run_dir).parts[-4:])


def study_group(run_dir: Path) -> str:
    """The results folder the run belongs to (`results/ablations` for `results/ablations/runs/...`)."""
    parts = Path(run_dir).parts[:-4]
    if parts and parts[-1] == "runs":
        parts = parts[:-1]
    folder = Path(*parts) if parts else Path(".")
    try:  # as the study names it: relative to where the workflow runs
        return str(folder.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(folder)


def scalars(record: Mapping[str, Any]) -> dict[str, float]:
    """The numeric fields of a record (what a curve can show), the step left out."""
    return {key: float(value) for key, value in record.items()
            if key != "step" and isinstance(value, (int, float))}


class _TensorBoard:
    """Event files under `tracking/tensorboard`; the wall time of each point is the training clock,
    so TensorBoard's 'Relative' horizontal axis is the training time and 'Step' the step."""

    def __init__(self, folder: Path, name: str, metadata: Mapping, resume_step: int):
        from torch.utils.tensorboard import SummaryWriter

        # purge_step: points past the checkpoint a run resumes from are logged again, identically
        self.writer = SummaryWriter(str(folder / "tensorboard"), purge_step=resume_step + 1 if resume_step else None)
        if not resume_step:
            for key, value in metadata.items():
                self.writer.add_text(f"run/{key}", "```\n" + json.dumps(value, indent=2, default=str) + "\n```", 0,
                                     walltime=0.0)
            self.writer.add_text("run/name", name, 0, walltime=0.0)

    def log(self, prefix: str, record: Mapping) -> None:
        clock = float(record.get("train_time_s", 0.0))
        for key, value in scalars(record).items():
            self.writer.add_scalar(f"{prefix}/{key}", value, record["step"], walltime=clock)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class _WandB:
    """A W&B run whose id is kept in `tracking/wandb-id` so that a resumed run continues it."""

    def __init__(self, folder: Path, name: str, group: str, metadata: Mapping):
        import wandb

        id_file = folder / "wandb-id"
        run_id = id_file.read_text().strip() if id_file.is_file() else None  # None: W&B makes one
        self.run = wandb.init(project=os.environ.get("WANDB_PROJECT", "pods"), name=name, group=group, id=run_id,
                              resume="allow", dir=str(folder), config=dict(metadata), reinit="create_new")
        id_file.write_text(self.run.id + "\n")
        # W&B's own step only grows; the trainer's step and clock are the x-axes to choose from
        for prefix in ("train", "eval"):
            self.run.define_metric(f"{prefix}/step")
            self.run.define_metric(f"{prefix}/train_time_s")
            self.run.define_metric(f"{prefix}/*", step_metric=f"{prefix}/step")

    def log(self, prefix: str, record: Mapping) -> None:
        self.run.log({f"{prefix}/{key}": value for key, value in {"step": record["step"], **scalars(record)}.items()})

    def close(self) -> None:
        self.run.finish()


class _Trackio:
    """A Trackio run of the run's name in its project (`resume='allow'` continues it)."""

    def __init__(self, name: str, group: str, metadata: Mapping):
        import trackio

        self.run = trackio.init(project=os.environ.get("TRACKIO_PROJECT", "pods"), name=name, group=group,
                                config=json.loads(json.dumps(dict(metadata), default=str)), resume="allow",
                                embed=False)

    def log(self, prefix: str, record: Mapping) -> None:
        self.run.log({f"{prefix}/{key}": value for key, value in scalars(record).items()}, step=record["step"])

    def close(self) -> None:
        self.run.finish()


class Tracker:
    """The trackers of one run (none when `report_to` is empty: then every call does nothing).

    Only process 0 makes one; `resume_step` is the step the run continues from (0: a fresh start).
    """

    def __init__(self, report_to: list, run_dir: Path, metadata: Mapping, resume_step: int = 0):
        self.backends: list = []
        if not report_to:
            return
        folder = Path(run_dir) / FOLDER
        folder.mkdir(parents=True, exist_ok=True)
        name, group = run_name(run_dir), study_group(run_dir)
        for backend in report_to:
            if backend == "tensorboard":
                self.backends.append(_TensorBoard(folder, name, metadata, resume_step))
            elif backend == "wandb":
                self.backends.append(_WandB(folder, name, group, metadata))
            elif backend == "trackio":
                self.backends.append(_Trackio(name, group, metadata))

    def log_step(self, record: Mapping) -> None:
        # throughput curves beside the record's own fields (derived here only: the JSONL has their parts)
        seconds = record.get("step_s") or 0.0
        extra = {f"{key}_per_s": record[key] / seconds for key in ("tokens_generated", "rollouts_generated")
                 if seconds > 0 and key in record}
        for backend in self.backends:
            backend.log("train", {**record, **extra})

    def log_eval(self, record: Mapping) -> None:
        for backend in self.backends:
            backend.log("eval", record)

    def close(self) -> None:
        for backend in self.backends:
            backend.close()
        self.backends = []


def hardware_profile(name: str, hardware_dir: str | Path = "config/hardware") -> dict | None:
    """The hardware profile the run was configured from, as run metadata (None when not found)."""
    import yaml

    path = Path(hardware_dir) / f"{name}.yaml"
    return yaml.safe_load(path.read_text()) if path.is_file() else None
