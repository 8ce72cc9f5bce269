"""Where a study's files live: its results, figures and models folders, each run's directory, the
warm starts and the hub folders, and the marker files whose existence means a job's output is whole."""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from pods.training import hub
from pods.vocabulary import run_path


class StudyPaths:
    """The paths of a validated study config (results_dir, models_dir, figures_dir, summary)."""

    def __init__(self, config: Mapping):
        self.benchmarks = config["benchmarks"]
        self.results = config["results_dir"].rstrip("/")
        self.models = config["models_dir"].rstrip("/")
        self.figures = config["figures_dir"].rstrip("/")
        self.runs_dir = f"{self.results}/runs"
        self.logs = f"{self.results}/logs"
        self.summary_csv = f"{self.results}/{config['summary']}"
        self.summary_md = self.summary_csv[: -len(".csv")] + ".md"
        self.study_file = str(Path(self.summary_csv).with_name("study.yaml"))
        # the step costs a cost-clock study trains on: the protocol's (step_costs), else its own
        self.step_costs = (config.get("step_costs") or f"{self.results}/cost").rstrip("/")

    def run_dir(self, run) -> str:
        """The directory of a `pods.study.expansion.Run`."""
        return run_path(self.runs_dir, benchmark=run.benchmark, hardware=run.hardware, method=run.method,
                        seed=run.seed)

    def step_cost_file(self, benchmark: str, hardware: str) -> str:
        """The `pods cost` file of a benchmark on a hardware profile (a study on the cost clock)."""
        return f"{self.step_costs}/{benchmark}/{hardware}.json"

    # ---- base models: a warm start, a hub id's fetched folder, or a folder as it is
    def uses_warmstart(self, label: str) -> bool:
        return self.benchmarks[label]["base_model"] == "warmstart"

    def warmstart_dir(self, label: str) -> str:
        return f"{self.models}/{label}/base"

    def warmstart_marker(self, label: str) -> str:
        """Written after the warm start's model folder is saved: its existence means the base is ready."""
        return f"{self.warmstart_dir(label)}/warmstart.json"

    def base_model_dir(self, label: str) -> str:
        if self.uses_warmstart(label):
            return self.warmstart_dir(label)
        base = self.benchmarks[label]["base_model"]
        return self.hub_folder("model", base) if hub.is_hub_id(base) else base

    def base_model_marker(self, label: str) -> str | None:
        """The file whose existence means the benchmark's base model is ready when the workflow
        builds it: a warm start, or any folder under models_dir that another rule writes (e.g. the
        SmolLM2 conversion), or a hub id's fetched folder (`hub.json`). None for a folder outside
        models_dir, which the trainer reads as it is."""
        if self.uses_warmstart(label):
            return self.warmstart_marker(label)
        path = self.benchmarks[label]["base_model"].rstrip("/")
        if hub.is_hub_id(path):
            return self.hub_marker("model", path)
        return f"{path}/config.json" if path.startswith(self.models + "/") else None

    # ---- the hub: fetched once per id, before any train job
    def hub_folder(self, repo_type: str, hub_id: str) -> str:
        return f"{self.models}/hub/{hub.local_name(hub_id, repo_type)}"

    def hub_marker(self, repo_type: str, hub_id: str) -> str:
        """Written last by `pods fetch --out`: its existence means the folder is complete."""
        return f"{self.hub_folder(repo_type, hub_id)}/{hub.ORIGIN}"
