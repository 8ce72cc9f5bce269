"""The paper's figures and speedups, regenerated from the authors' released results.

The authors released every per-checkpoint evaluation behind the paper in
`github.com/YixuanEvenXu/pods` at commit 187f43b, folder `results/` (Apache-2.0). This module
  1. downloads that folder at the pinned commit, checking each file's sha256 (`download_release`),
  2. imports it into the run schema of docs/contracts.md (`import_release`), so that
  3. our own `pods.analysis` and `pods.plots` produce the paper's figures and tables from it
     (`build_paper_outputs`): nothing here re-implements the authors' aggregation.

Regenerate (offline, from a local copy of the release, e.g. the one CI uses):
    snakemake --cores all paper_figures --config paper_results_dir=../shared/paper-results
or online (downloads the pinned commit's results/ into resources/paper/release, checksummed):
    snakemake --cores all paper_figures
or without Snakemake:
    pods paper import --src ../shared/paper-results --out resources/paper
    pods paper figures --runs resources/paper --out figures/paper

How the release maps onto run directories `<out>/runs/{benchmark}/{hardware}/{method}/seed{k}`:
  Instruct-GSM8K[-MaxR|-Rand]-512-{n}-{m}-Run{k}.json  gsm8k/l40s-lora/<method>/seed{k}
  Instruct-MATH-NF-512-{n}-{m}-Run{k}.json             math/l40s-lora/<method>/seed{k}
  Instruct-Llama-512-{n}-{m}-0.04-Run{k}.json          gsm8k-llama/l40s-lora/<method>/seed{k}
  {h100s,a100s}-{acc,length}.csv, run <P>-s{k}-p8-n{n}-m{m}-ga{GA}
                                                      gsm8k/{h100x8,a100x8}-zero2/<method>/seed{k}
`gsm8k-llama` is GSM8K trained with the Llama-3.2 Instruct base model (beta = 0.04, the reward of
the authors' Llama commit); the model of every imported run is in its config.yaml. `math` is the
MATH training set with the correctness-only reward ("MATH-NF"). Rules: no suffix = max_variance,
MaxR = max_reward, Rand = random; n = m is vanilla GRPO (`grpo-n{n}-m{n}`).

Single-GPU runs: the k-th checkpoint (in step order) becomes train_time_s = k x 1800 (k x 600 for
Llama), the nominal save time the authors plot; one evaluation row per eval set the checkpoint
holds (gsm8k, math500, amc23 for Qwen; gsm8k only for Llama) with `accuracy` = mean over the 5
repeats of `ans_acc` (`both_acc` for Llama, as the paper plots it; all three metrics are kept as
extra fields); the base model is the t = 0 row of each eval set the run evaluates later. An eval
set found only in the base file (base-llama.json's amc23 and math500) is left out and named in
the import report. Every checkpoint is imported, also past the horizon and where a run has fewer
than its siblings (one released Llama run has 11 of 12); figures and tables stop at the horizon,
which every released run reaches (a run ending before it would enter the curves with its last
checkpoint, the nearest evaluation, where the authors' script averages the runs present).
summary.json carries s_per_step = horizon / global step of the horizon checkpoint (6 h; 1.5 h for
Llama), the authors' "seconds per training step".
Multi-GPU runs: one row per wandb evaluation with train_time_s = `eval/time` (evaluation time
excluded), `step` = the optimiser step inferred from wandb's `_step` log-call counter
(`inferred_optimizer_steps`) and `wandb_step` = `_step`. Their s_per_step is training time /
inferred steps at the evaluation nearest 30 min; the authors' bar-chart formula 1800 x GA /
`_step` at 30 min is kept as s_per_step_authors.
A seed that appears in only one of the acc/length exports is left out and named in the import
report, as the authors' script intersects them too. wandb writes one row per logged evaluation
with every other run's cells empty; empty cells are no evaluation. A final evaluation that
follows no optimiser step (three A100 runs: training stopped before the next step, the weights are
those evaluated before) is left out and named in the report: the run schema has one evaluation
per step, and in every released run it lies past 30 min, where no grid point takes it.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import re
import urllib.request
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import numpy as np
import pandas as pd
import yaml

from pods import analysis, plots, verdict
from pods import runs as runfiles
from pods.config import method_name, parse_method
from pods.atomic import atomic_write_bytes, atomic_write_text, write_json, write_yaml

RELEASE_REPO = "YixuanEvenXu/pods"
RELEASE_COMMIT = "187f43b648f69385103029c2dd0934521e17bb71"
RELEASE_URL = "https://raw.githubusercontent.com/{repo}/{commit}/results/{file}"
# Package data (config/paper_figures.yaml links to it), so an installed wheel has it too.
MANIFEST = Path(str(resources.files("pods") / "data" / "paper_figures.yaml"))

RUN_FILE_RE = re.compile(
    r"^Instruct-(?P<family>GSM8K|MATH-NF|Llama)(?:-(?P<rule>MaxR|Rand))?-512-(?P<n>\d+)-(?P<m>\d+)"
    r"(?:-(?P<beta>\d+(?:\.\d+)?))?-Run(?P<run>\d+)\.json$"
)
CHECKPOINT_RE = re.compile(r"^checkpoint-(\d+)$")
WANDB_COLUMN_RE = re.compile(
    r"^data/(?P<prefix>[A-Za-z0-9]+)-s(?P<seed>\d+)-p(?P<p>\d+)-n(?P<n>\d+)-m(?P<m>\d+)-ga(?P<ga>\d+)"
    r" - (?P<metric>.+?)(?P<agg>__MIN|__MAX)?$"
)
RULES = {None: "max_variance", "MaxR": "max_reward", "Rand": "random"}
EVAL_SETS = ("gsm8k", "math500", "amc23")
N_ITEMS = {"gsm8k": 1319, "math500": 496, "amc23": 40}  # after the <= 512-token prompt filter
RUNS_PER_SETTING = 10


@dataclass(frozen=True)
class Family:
    """A group of single-GPU release files sharing a base model and an evaluation protocol."""

    benchmark: str       # run-directory component
    eval_set: str        # the benchmark's own test set (what the paper plots)
    metric: str          # per-repeat accuracy field the paper plots
    base_file: str       # base-model evaluation, the t = 0 point
    interval_s: int      # checkpoint k was saved after k x interval_s of training
    horizon_s: int       # end of the plotted curve and of the s/step measurement
    model: str


FAMILIES = {
    "GSM8K": Family("gsm8k", "gsm8k", "ans_acc", "base-qwen.json", 1800, 21600, "Qwen/Qwen2.5-3B-Instruct"),
    "MATH-NF": Family("math", "math500", "ans_acc", "base-qwen.json", 1800, 21600, "Qwen/Qwen2.5-3B-Instruct"),
    "Llama": Family("gsm8k-llama", "gsm8k", "both_acc", "base-llama.json", 600, 5400,
                    "Llama-3.2 Instruct (size not stated in the release)"),
}
SINGLE_GPU_HARDWARE = "l40s-lora"


@dataclass(frozen=True)
class Cluster:
    """A pair of wandb exports of 8-GPU runs."""

    hardware: str
    prefix: str
    model: str
    eval_log_calls: int    # wandb log calls per evaluation (docs/paper.md 4.1), for inferred_optimizer_steps
    horizon_s: int = 1800  # the authors plot and measure 0-30 min
    grid_s: int = 120


CLUSTERS = {
    # wandb log calls per evaluation that fit every released evaluation exactly (but the final
    # ones, see inferred_optimizer_steps); a mismatch stops the import
    "h100s": Cluster("h100x8-zero2", "GRPO", "Qwen/Qwen2.5-3B-Instruct", eval_log_calls=5),
    "a100s": Cluster("a100x8-zero2", "GR7B", "7B instruct model (likely Qwen/Qwen2.5-7B-Instruct)", eval_log_calls=45),
}

# release file prefix -> (family, rule suffix, n, m, beta suffix): every single-GPU setting released
SINGLE_GPU_SETTINGS = [
    *[("GSM8K", None, n, 16, None) for n in (16, 32, 64, 128, 256)],
    *[("GSM8K", None, 64, m, None) for m in (8, 4, 2)],
    ("GSM8K", "MaxR", 64, 16, None),
    ("GSM8K", "Rand", 64, 16, None),
    ("MATH-NF", None, 8, 8, None),
    ("MATH-NF", None, 32, 8, None),
    ("Llama", None, 16, 16, "0.04"),
    ("Llama", None, 64, 16, "0.04"),
]


def setting_prefix(family: str, rule: str | None, n: int, m: int, beta: str | None) -> str:
    parts = ["Instruct", family] + ([rule] if rule else []) + ["512", str(n), str(m)] + ([beta] if beta else [])
    return "-".join(parts)


def setting_method(rule: str | None, n: int, m: int) -> str:
    return method_name("identity" if n == m else RULES[rule], n, m)


def release_files() -> list[str]:
    """Every file of the release's results/ folder that the paper's figures use."""
    files = [f"{setting_prefix(*s)}-Run{k}.json" for s in SINGLE_GPU_SETTINGS
             for k in range(1, RUNS_PER_SETTING + 1)]
    files += sorted({fam.base_file for fam in FAMILIES.values()})
    files += [f"{name}-{kind}.csv" for name in CLUSTERS for kind in ("acc", "length")]
    return files


# --------------------------------------------------------------------------------------------
# Download with checksums
# --------------------------------------------------------------------------------------------
def sha256_file(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def make_manifest(src: str | os.PathLike) -> dict:
    """Checksums of the release files present in `src`; absent ones get `null` (downloaded unpinned)."""
    src = Path(src)
    files = {name: (sha256_file(src / name) if (src / name).exists() else None) for name in release_files()}
    return {"repo": RELEASE_REPO, "commit": RELEASE_COMMIT, "url": RELEASE_URL, "files": files}


def load_manifest(path: str | os.PathLike = MANIFEST) -> dict:
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"release manifest {path} does not exist")
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    release = data.get("release", data)
    for key in ("repo", "commit", "url", "files"):
        if key not in release:
            raise ValueError(f"{path}: release manifest lacks {key!r}")
    return release


def download_release(dest: str | os.PathLike, manifest: Mapping, url: str | None = None,
                     timeout_s: float = 60) -> Path:
    """Fetch every manifest file into `dest` and check its sha256 where the manifest pins one.

    Files already in `dest` with the pinned checksum are kept. Writes `dest/SHA256SUMS` with the
    checksum of every file fetched (the record for files the manifest could not pin).
    """
    dest = Path(dest)
    template = url or manifest["url"]
    sums = []
    for name, expected in manifest["files"].items():
        target = dest / name
        if not (expected and target.exists() and sha256_file(target) == expected):
            source = template.format(repo=manifest["repo"], commit=manifest["commit"], file=name)
            try:
                with urllib.request.urlopen(source, timeout=timeout_s) as response:
                    data = response.read()
            except OSError as exc:
                raise FileNotFoundError(f"could not download {name} from {source}: {exc}") from None
            got = hashlib.sha256(data).hexdigest()
            if expected and got != expected:
                raise ValueError(f"{name}: sha256 {got} does not match the manifest's {expected}")
            atomic_write_bytes(target, data)
        sums.append(f"{sha256_file(target)}  {name}")
    atomic_write_text(dest / "SHA256SUMS", "\n".join(sums) + "\n")
    return dest


# --------------------------------------------------------------------------------------------
# Import into the run schema
# --------------------------------------------------------------------------------------------
def _read_json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None


def _mean_of(values, where: str) -> float:
    if not isinstance(values, list) or not values or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        raise ValueError(f"{where}: expected a non-empty list of numbers")
    return float(np.mean(values))


def eval_rows(block: Mapping, metric: str, where: str) -> list[dict]:
    """One row per eval set of a checkpoint (or base-model) block of the release's JSON."""
    if not isinstance(block, Mapping) or not block:
        raise ValueError(f"{where}: expected a mapping of eval sets")
    rows = []
    for eval_set in sorted(block):
        entry = block[eval_set]
        here = f"{where}/{eval_set}"
        if not isinstance(entry, Mapping):
            raise ValueError(f"{here}: expected a mapping")
        for key in (metric, "lengths"):
            if key not in entry:
                raise ValueError(f"{here}: missing {key!r}")
        row = {"eval_set": eval_set,
               "accuracy": _mean_of(entry[metric], f"{here}/{metric}"),
               "mean_length": _mean_of(entry["lengths"], f"{here}/lengths"),
               "n_items": N_ITEMS.get(eval_set),
               "repeats": len(entry[metric]),
               "metric": metric}
        for extra in ("ans_acc", "for_acc", "both_acc"):
            if extra in entry:
                row[extra] = _mean_of(entry[extra], f"{here}/{extra}")
        rows.append(row)
    return rows


def checkpoints(log: Mapping, path: Path) -> list[tuple[int, str]]:
    """(global step, key) of every checkpoint, in step order."""
    if not isinstance(log, Mapping) or not log:
        raise ValueError(f"{path}: expected a non-empty mapping of checkpoint-<step> entries")
    out = []
    for key in log:
        match = CHECKPOINT_RE.match(key)
        if match is None:
            raise ValueError(f"{path}: key {key!r} is not checkpoint-<step>")
        out.append((int(match[1]), key))
    return sorted(out)


def import_single_gpu_run(path: Path, base_rows: list[dict], family: Family, rule: str | None,
                          n: int, m: int, run: int, out: Path) -> tuple[Path, list[str]]:
    """Write one run; returns its directory and the eval sets of the base file it never evaluates."""
    method = setting_method(rule, n, m)
    log = _read_json(path)
    cps = checkpoints(log, path)
    later = [{"step": step, "train_time_s": float(k * family.interval_s), "wall_time_s": None, **row}
             for k, (step, key) in enumerate(cps, 1)
             for row in eval_rows(log[key], family.metric, f"{path.name}:{key}")]
    # The base file is shared by runs that evaluate different sets (base-llama.json has amc23 and
    # math500, the Llama runs gsm8k only): a run gets the t = 0 row of the sets it evaluates.
    evaluated = {r["eval_set"] for r in later}
    base_sets = {r["eval_set"] for r in base_rows}
    if evaluated - base_sets:
        raise ValueError(f"{path}: evaluates {sorted(evaluated - base_sets)}, which {family.base_file} "
                         f"(the t = 0 point) lacks; it has {sorted(base_sets)}")
    records = [{"step": 0, "train_time_s": 0.0, "wall_time_s": None, **row}
               for row in base_rows if row["eval_set"] in evaluated] + later
    # the authors' s/step: the horizon over the global step of the checkpoint saved at the horizon
    horizon_index = min(len(cps), family.horizon_s // family.interval_s) - 1
    steps = cps[horizon_index][0]
    parsed = parse_method(method)
    identity = {"benchmark": family.benchmark, "hardware": SINGLE_GPU_HARDWARE, "method": method,
                "rule": parsed.rule, "n": n, "m": m, "seed": run}
    run_dir = Path(runfiles.run_path(str(out / "runs"), **{k: identity[k] for k in runfiles.RUN_KEY}))
    summary = runfiles.build_summary(
        identity, records, [], status="complete", eval_set=family.eval_set, steps=steps,
        train_time_s=float((horizon_index + 1) * family.interval_s), wall_time_s=None,
        s_per_step_source="horizon / global step of the horizon checkpoint (authors' definition)",
        phase_s_per_step={}, source=f"{RELEASE_REPO}@{RELEASE_COMMIT[:7]}:results/{path.name}",
    )
    config = {"source": summary["source"], "model": family.model, "benchmark": family.benchmark,
              "eval_set": family.eval_set, "metric": family.metric, "checkpoint_interval_s": family.interval_s,
              "horizon_s": family.horizon_s, "rule": parsed.rule, "n": n, "m": m}
    _write_run(run_dir, records, summary, config)
    return run_dir, sorted(base_sets - evaluated)


def _write_run(run_dir: Path, records: list[dict], summary: dict, config: dict) -> None:
    """Check the imported run against the run schema (as every reader will), then write it."""
    try:
        runfiles.check_evals(list(enumerate(records, 1)), str(run_dir / "evals.jsonl"),
                             base=summary.get("base_evaluation", True))
        runfiles.check_summary(summary, records, None, runfiles.run_key(run_dir), str(run_dir / "summary.json"))
    except runfiles.RunFileError as exc:
        raise runfiles.RunFileError(f"{exc} (imported from {summary['source']})") from None
    lines = "".join(json.dumps(r, allow_nan=False) + "\n" for r in records)
    atomic_write_text(run_dir / "evals.jsonl", lines)
    write_yaml(run_dir / "config.yaml", config)
    write_json(run_dir / "summary.json", summary)


def read_wandb_export(path: Path) -> dict[tuple, pd.DataFrame]:
    """(prefix, seed, n, m, ga) -> DataFrame[time, <metric>...] of one wandb CSV export."""
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing")
    try:
        table = pd.read_csv(path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not a readable CSV ({exc})") from None
    if "eval/time" not in table.columns:
        raise ValueError(f"{path}: no 'eval/time' column")
    runs: dict[tuple, dict[str, pd.Series]] = {}
    for column in table.columns:
        if column == "eval/time":
            continue
        match = WANDB_COLUMN_RE.match(column)
        if match is None:
            raise ValueError(f"{path}: column {column!r} is not 'data/<run> - <metric>'")
        if match["agg"]:
            continue  # __MIN/__MAX repeat the value for single-run panels
        key = (match["prefix"], int(match["seed"]), int(match["n"]), int(match["m"]), int(match["ga"]))
        values = pd.to_numeric(table[column], errors="coerce")
        if values.notna().sum() != table[column].notna().sum():
            raise ValueError(f"{path}: column {column!r} has non-numeric cells")
        runs.setdefault(key, {})[match["metric"]] = values
    times = pd.to_numeric(table["eval/time"], errors="coerce")
    if times.isna().any():
        raise ValueError(f"{path}: 'eval/time' has empty or non-numeric cells")
    return {key: pd.DataFrame({"time": times, **cols}) for key, cols in runs.items()}


def inferred_optimizer_steps(wandb_steps: Sequence[int], grad_accum: int, eval_log_calls: int) -> list[int]:
    """Optimiser steps at each evaluation of an 8-GPU export, from wandb's `_step` counter.

    In the authors' TRL fork every micro-step and reward function logs to wandb, so `_step`
    advances 3 x GA + 5 per optimiser step and `eval_log_calls` per evaluation, 2 fewer at the
    first (docs/paper.md 4.1). On the released runs (5 calls on the H100s, 45 on the A100s) this gives
    whole numbers at every evaluation but the last of some runs (2 counts off: the end-of-training
    logs), hence the rounding; counts that fit no whole number of steps stop the import. The last
    evaluation may repeat the step before it: training stopped before another optimiser step and
    the final evaluation saw the same weights (three A100 runs; `import_cluster` leaves it out).
    """
    per_step = 3 * grad_accum + 5
    exact = [(s - (eval_log_calls * i - 2)) / per_step for i, s in enumerate(wandb_steps, 1)]
    steps = [round(x) for x in exact]
    misfit = [i for i, x in enumerate(exact[:-1], 1) if abs(x - round(x)) > 1e-9]
    if misfit or steps[0] < 1 or any(b <= a for a, b in zip(steps, steps[1:-1])) or (
            len(steps) > 1 and steps[-1] < steps[-2]):
        raise ValueError(f"wandb _step {list(wandb_steps)[:6]}... does not fit {per_step} log calls per optimiser "
                         f"step and {eval_log_calls} per evaluation (GA {grad_accum}; docs/paper.md 4.1)")
    return steps


ACC_METRIC = "eval/rewards/accuracy_reward/mean"
LEN_METRIC = "eval/completions/mean_length"


def import_cluster(src: Path, name: str, cluster: Cluster, out: Path) -> tuple[list[Path], list[str]]:
    """Import `<name>-acc.csv` and `<name>-length.csv`; returns (run dirs, notes on left-out seeds)."""
    acc = read_wandb_export(src / f"{name}-acc.csv")
    length = read_wandb_export(src / f"{name}-length.csv")
    notes, run_dirs = [], []
    for label, table, metric in (("acc", acc, ACC_METRIC), ("length", length, LEN_METRIC)):
        for key, frame in table.items():
            for col in ("_step", metric):
                if col not in frame:
                    raise ValueError(f"{src / f'{name}-{label}.csv'}: run {key} has no {col!r} column")
            if key[0] != cluster.prefix:
                raise ValueError(f"{src / f'{name}-{label}.csv'}: run prefix {key[0]!r}, expected {cluster.prefix!r}")
    for key in sorted(set(acc) ^ set(length)):
        where = "acc" if key in acc else "length"
        notes.append(f"{name}: seed {key[1]} (n={key[2]}, m={key[3]}, ga={key[4]}) is only in the "
                     f"{where} export and is left out, as in the authors' script")
    for key in sorted(set(acc) & set(length)):
        prefix, seed, n, m, ga = key
        a = acc[key].loc[acc[key][ACC_METRIC].notna(), ["time", "_step", ACC_METRIC]]
        b = length[key].loc[length[key][LEN_METRIC].notna(), ["time", "_step", LEN_METRIC]]
        merged = a.merge(b, on="time", how="outer", suffixes=("", "_len")).sort_values("time")
        merged["_step"] = merged["_step"].fillna(merged["_step_len"])
        method = method_name("identity" if n == m else "max_variance", n, m)
        try:
            optimizer_steps = inferred_optimizer_steps(merged["_step"].astype(int).tolist(), ga, cluster.eval_log_calls)
        except ValueError as exc:
            raise ValueError(f"{src / f'{name}-acc.csv'}: run {prefix}-s{seed}: {exc}") from None
        if len(optimizer_steps) > 1 and optimizer_steps[-1] == optimizer_steps[-2]:
            # the run schema has one evaluation per step and eval set: the same weights' second one goes
            last_t, prev_t = merged["time"].iloc[-1], merged["time"].iloc[-2]
            notes.append(f"{name}: seed {seed} (n={n}, m={m}, ga={ga}): the last evaluation (t = {last_t:.0f} s) "
                         f"follows no optimiser step after the one at t = {prev_t:.0f} s (wandb _step "
                         f"+{int(merged['_step'].iloc[-1] - merged['_step'].iloc[-2])}) and is left out")
            merged, optimizer_steps = merged.iloc[:-1], optimizer_steps[:-1]
        records = [{
            "step": step, "train_time_s": float(r["time"]), "wall_time_s": None,
            "eval_set": "gsm8k",
            "accuracy": None if math.isnan(r[ACC_METRIC]) else float(r[ACC_METRIC]),
            "mean_length": None if math.isnan(r[LEN_METRIC]) else float(r[LEN_METRIC]),
            "n_items": N_ITEMS["gsm8k"], "repeats": 1, "metric": "accuracy_reward",
            "wandb_step": int(r["_step"]),
        } for step, r in zip(optimizer_steps, merged.to_dict("records"))]
        times = merged["time"].to_numpy(float)
        at_30 = int(np.abs(times - cluster.horizon_s).argmin())
        step_30 = int(merged["_step"].to_numpy()[at_30])
        parsed = parse_method(method)
        identity = {"benchmark": "gsm8k", "hardware": cluster.hardware, "method": method, "rule": parsed.rule,
                    "n": n, "m": m, "seed": seed, "grad_accum": ga}
        summary = runfiles.build_summary(
            identity, records, [], status="complete", eval_set="gsm8k", steps=None,
            train_time_s=float(times.max()), wall_time_s=None,
            s_per_step=float(times[at_30]) / optimizer_steps[at_30], steps_at_horizon=optimizer_steps[at_30],
            s_per_step_source="training time / optimiser steps at the evaluation nearest 30 min, the steps "
                              "inferred from wandb _step (inferred_optimizer_steps, docs/paper.md 4.1)",
            s_per_step_authors=cluster.horizon_s * ga / step_30, wandb_step_at_horizon=step_30,
            phase_s_per_step={}, base_evaluation=False,  # the exports start at the first logged evaluation
            source=f"{RELEASE_REPO}@{RELEASE_COMMIT[:7]}:results/{name}-{{acc,length}}.csv "
                   f"run {prefix}-s{seed}-p8-n{n}-m{m}-ga{ga}",
        )
        config = {"source": summary["source"], "model": cluster.model, "benchmark": "gsm8k",
                  "eval_set": "gsm8k", "metric": ACC_METRIC, "rule": parsed.rule, "n": n, "m": m,
                  "grad_accum": ga, "gpus": 8, "step_unit": "optimiser step inferred from wandb _step"}
        run_dir = Path(runfiles.run_path(str(out / "runs"), benchmark="gsm8k", hardware=cluster.hardware,
                                         method=method, seed=seed))
        _write_run(run_dir, records, summary, config)
        run_dirs.append(run_dir)
    return run_dirs, notes


def _present(files: list[Path], setting: str, report: dict) -> bool:
    """True when all files are there, False (reported missing) when none are; else an error."""
    present = [f for f in files if f.exists()]
    if not present:
        report["missing"][setting] = [f.name for f in files]
        return False
    if len(present) < len(files):
        absent = next(f for f in files if not f.exists())
        raise FileNotFoundError(f"{absent} is missing (other files of {setting} are present)")
    return True


def import_release(src: str | os.PathLike, out: str | os.PathLike) -> dict:
    """Import every released setting present in `src` into `<out>/runs/...`.

    A setting is imported when all its files are present and reported missing when none are;
    a partly present setting, a malformed file or a missing base-model file is an error naming
    the file. Writes and returns `<out>/import_report.json`.
    """
    src, out = Path(src), Path(out)
    if not src.is_dir():
        raise FileNotFoundError(f"release folder {src} does not exist")
    report = {"source": str(src), "commit": RELEASE_COMMIT, "imported": {}, "missing": {},
              "base_only_eval_sets": {}, "notes": []}
    # every presence check first, so a missing file stops the import before anything is written
    single, clusters = [], []
    for family_name, rule, n, m, beta in SINGLE_GPU_SETTINGS:
        prefix = setting_prefix(family_name, rule, n, m, beta)
        files = [src / f"{prefix}-Run{k}.json" for k in range(1, RUNS_PER_SETTING + 1)]
        if _present(files, prefix, report):
            base_path = src / FAMILIES[family_name].base_file
            if not base_path.exists():
                raise FileNotFoundError(f"{base_path} is missing (needed as the t = 0 point of {prefix})")
            single.append((prefix, FAMILIES[family_name], rule, n, m, files))
    for name, cluster in CLUSTERS.items():
        if _present([src / f"{name}-{kind}.csv" for kind in ("acc", "length")], name, report):
            clusters.append((name, cluster))

    base_cache: dict[tuple[str, str], list[dict]] = {}
    for prefix, family, rule, n, m, files in single:
        key = (family.base_file, family.metric)
        if key not in base_cache:
            base_cache[key] = eval_rows(_read_json(src / family.base_file), family.metric, family.base_file)
        base_only: dict[str, list[int]] = {}
        for k, path in enumerate(files, 1):
            for eval_set in import_single_gpu_run(path, base_cache[key], family, rule, n, m, k, out)[1]:
                base_only.setdefault(eval_set, []).append(k)
        report["imported"][prefix] = {"benchmark": family.benchmark, "hardware": SINGLE_GPU_HARDWARE,
                                      "method": setting_method(rule, n, m), "runs": len(files)}
        if base_only:
            report["base_only_eval_sets"][prefix] = base_only
            for eval_set, runs in base_only.items():
                which = ("no run evaluates" if len(runs) == len(files) else
                         f"run {runs[0]} does not evaluate" if len(runs) == 1 else
                         f"runs {', '.join(map(str, runs))} do not evaluate")
                report["notes"].append(f"{prefix}: {eval_set!r} of {family.base_file} is left out: "
                                       f"{which} it after t = 0")
    for name, cluster in clusters:
        run_dirs, notes = import_cluster(src, name, cluster, out)
        report["notes"] += notes
        report["imported"][name] = {"benchmark": "gsm8k", "hardware": cluster.hardware,
                                    "runs": [str(p.relative_to(out)) for p in run_dirs]}
    write_json(out / "import_report.json", report)
    return report


# --------------------------------------------------------------------------------------------
# The paper's figures and tables, with our analysis and plots
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PaperFigure:
    """One figure of the paper: which runs, which grid, how its axes read."""

    benchmark: str
    hardware: str
    eval_set: str
    methods: tuple[str, ...]   # the first is the baseline of the speedup
    grid_s: int
    horizon_s: int
    time_unit: str             # "h" or "min"
    xlabel: str
    source: str                # release files behind it, for "missing" reports
    design: str = "equal_update"


_L40S = "Training Time on One L40S (hours)"
_GSM8K_N = tuple(setting_method(None, n, 16) for n in (16, 32, 64, 128, 256))
_GSM8K_M = tuple(setting_method(None, 64, m) for m in (16, 8, 4, 2))
PAPER_FIGURES: dict[str, PaperFigure] = {
    "gsm8k_main": PaperFigure("gsm8k", "l40s-lora", "gsm8k", ("grpo-n16-m16", "pods-max_variance-n64-m16"),
                              1800, 21600, "h", _L40S, "Instruct-GSM8K-512-{16-16,64-16}"),
    "math_main": PaperFigure("math", "l40s-lora", "math500", ("grpo-n8-m8", "pods-max_variance-n32-m8"),
                             1800, 21600, "h", _L40S, "Instruct-MATH-NF-512-{8-8,32-8}"),
    "llama_main": PaperFigure("gsm8k-llama", "l40s-lora", "gsm8k", ("grpo-n16-m16", "pods-max_variance-n64-m16"),
                              600, 5400, "h", _L40S, "Instruct-Llama-512-{16-16,64-16}-0.04"),
    "gsm8k_n_scaling": PaperFigure("gsm8k", "l40s-lora", "gsm8k", _GSM8K_N, 1800, 21600, "h", _L40S,
                                   "Instruct-GSM8K-512-{16,32,64,128,256}-16"),
    "gsm8k_m_scaling": PaperFigure("gsm8k", "l40s-lora", "gsm8k", _GSM8K_M, 1800, 21600, "h", _L40S,
                                   "Instruct-GSM8K-512-64-{16,8,4,2}"),
    "down_sampling_rule": PaperFigure("gsm8k", "l40s-lora", "gsm8k",
                                      ("pods-max_variance-n64-m16", "pods-max_reward-n64-m16", "pods-random-n64-m16"),
                                      1800, 21600, "h", _L40S, "Instruct-GSM8K[-MaxR|-Rand]-512-64-16"),
    "h100s": PaperFigure("gsm8k", "h100x8-zero2", "gsm8k", ("grpo-n32-m32", "pods-max_variance-n128-m32"),
                         120, 1800, "min", "Training Time on 8 H100s (minutes)", "h100s-{acc,length}.csv",
                         "equal_generation"),
    "a100s": PaperFigure("gsm8k", "a100x8-zero2", "gsm8k", ("grpo-n32-m32", "pods-max_variance-n128-m32"),
                         120, 1800, "min", "Training Time on 8 A100s (minutes)", "a100s-{acc,length}.csv",
                         "equal_generation"),
}
# speedups.csv setting -> figure whose first two methods are GRPO and PODS
SPEEDUP_SETTINGS = {"gsm8k-l40s": "gsm8k_main", "math-l40s": "math_main", "llama-l40s": "llama_main",
                    "h100x8": "h100s", "a100x8": "a100s"}
ABLATIONS = {"n_scaling": "gsm8k_n_scaling", "m_scaling": "gsm8k_m_scaling", "rule": "down_sampling_rule"}
ABLATION_TARGET = ("gsm8k_main", 0.99)  # "time to 80.82": 99% of GRPO's peak on GSM8K
ABLATION_TIMES_H = (0.5, 2, 4, 6)
UNIT_S = {"h": 3600.0, "min": 60.0}


TABLES = ("summary.csv", "summary.md", "speedups.csv", "ablations.csv", "curves.csv")


def figure_outputs(out_dir: str | os.PathLike, names: Iterable[str] | None = None,
                   tables_dir: str | os.PathLike | None = None) -> list[Path]:
    """The files `build_paper_outputs` writes for the given figures (all by default)."""
    out_dir = Path(out_dir)
    names = list(PAPER_FIGURES if names is None else names)
    files = [Path(tables_dir or out_dir) / name for name in TABLES]
    for name in names:
        for stem in (name, f"{name}_length"):
            files += [out_dir / f"{stem}.png", out_dir / f"{stem}.pdf"]
    return files


def available_figures(src: str | os.PathLike) -> list[str]:
    """Figures whose release files are all in the local copy `src`."""
    src = Path(src)
    needed = {
        "gsm8k_main": [setting_prefix("GSM8K", None, 16, 16, None), setting_prefix("GSM8K", None, 64, 16, None)],
        "math_main": [setting_prefix("MATH-NF", None, 8, 8, None), setting_prefix("MATH-NF", None, 32, 8, None)],
        "llama_main": [setting_prefix("Llama", None, 16, 16, "0.04"), setting_prefix("Llama", None, 64, 16, "0.04")],
        "gsm8k_n_scaling": [setting_prefix("GSM8K", None, n, 16, None) for n in (16, 32, 64, 128, 256)],
        "gsm8k_m_scaling": [setting_prefix("GSM8K", None, 64, m, None) for m in (16, 8, 4, 2)],
        "down_sampling_rule": [setting_prefix("GSM8K", r, 64, 16, None) for r in (None, "MaxR", "Rand")],
    }
    names = []
    for name in PAPER_FIGURES:
        if name in needed:
            ok = all((src / f"{p}-Run1.json").exists() for p in needed[name])
        else:
            ok = all((src / f"{name}-{kind}.csv").exists() for kind in ("acc", "length"))
        if ok:
            names.append(name)
    return names


def _arm(evals: pd.DataFrame, fig: PaperFigure, method: str) -> pd.DataFrame:
    return evals[(evals["benchmark"] == fig.benchmark) & (evals["hardware"] == fig.hardware)
                 & (evals["method"] == method) & (evals["eval_set"] == fig.eval_set)]


def figure_curves(evals: pd.DataFrame, fig: PaperFigure, value: str = "accuracy") -> dict[str, pd.DataFrame] | None:
    """method -> mean curve on the figure's grid; None when any arm has no runs."""
    grid = analysis.regular_grid(fig.grid_s, fig.horizon_s)
    curves = {}
    for method in fig.methods:
        arm = _arm(evals, fig, method)
        if arm.empty:
            return None
        curves[method] = analysis.mean_curve(arm, grid, how="nearest", value=value)
    return curves


def paper_step_times(evals: pd.DataFrame, summaries: pd.DataFrame, fig: PaperFigure) -> dict[str, float]:
    """The bar heights the paper shows: the mean over runs of horizon / steps (single GPU), or the
    authors' 1800 x GA / mean wandb _step at 30 min (multi-GPU; see docs/paper.md 4.1)."""
    bars = {}
    for method in fig.methods:
        runs = summaries[(summaries["benchmark"] == fig.benchmark) & (summaries["hardware"] == fig.hardware)
                         & (summaries["method"] == method)]
        if runs.empty:
            continue
        if fig.design == "equal_generation":
            ga = runs["grad_accum"].iloc[0]
            bars[method] = fig.horizon_s * ga / runs["wandb_step_at_horizon"].mean()
        else:
            bars[method] = float(runs["s_per_step"].mean())
    return bars


def _label(method: str, fig: PaperFigure, summaries: pd.DataFrame) -> str:
    label = parse_method(method).label
    if fig.design == "equal_generation":
        ga = summaries.loc[(summaries["hardware"] == fig.hardware) & (summaries["method"] == method), "grad_accum"]
        if len(ga):
            label = label[:-1] + f", GA {int(ga.iloc[0])})"
    return label


def paper_study(evals: pd.DataFrame) -> list[dict]:
    """The comparisons behind the paper's headline speedups, as a study of `pods.analysis`
    (each with the figure's eval set and checkpoint grid), for the settings whose runs are there."""
    study = []
    for setting, fig_name in SPEEDUP_SETTINGS.items():
        fig = PAPER_FIGURES[fig_name]
        if figure_curves(evals, fig) is None:
            continue
        study.append({"name": setting, "benchmark": fig.benchmark, "hardware": fig.hardware, "design": fig.design,
                      "baseline": fig.methods[0], "method": fig.methods[1], "eval_set": fig.eval_set,
                      "grid_s": fig.grid_s, "t_max_s": fig.horizon_s,
                      # the authors' own alignment: their 8-GPU evaluations fall between grid points
                      "align": "nearest"})
    return study


def paper_summary(evals: pd.DataFrame, summaries: pd.DataFrame, n_boot: int = 2000) -> pd.DataFrame:
    """Our summary table (every rule, verdict and decomposition of docs/verdict.md) on the
    authors' settings; their single-GPU s/step is horizon / global step, the 8-GPU one comes
    from the inferred optimiser steps."""
    study = paper_study(evals)
    if not study:
        return pd.DataFrame(columns=analysis.SUMMARY_COLUMNS)
    return analysis.summarize_study(study, evals, None, summaries, n_boot=n_boot)


# the time-to-target endpoints of pods.verdict that speedups.csv lists per setting
SPEEDUP_ENDPOINTS = ("paper_0.99", "paper_1.00", "isotonic_0.99")
SPEEDUP_COLUMNS = ["setting", "target_rule", "target", "target_accuracy", "t_grpo", "t_pods", "speedup",
                   "ci_low", "ci_high", "verdict", "unit", "status"]


def speedup_table(summary: pd.DataFrame) -> pd.DataFrame:
    """speedups.csv: time to the target for GRPO and PODS per setting and time rule, in the
    figure's unit and in % accuracy; settings without runs are listed as missing."""
    rows = []
    for setting, fig_name in SPEEDUP_SETTINGS.items():
        fig = PAPER_FIGURES[fig_name]
        scale = UNIT_S[fig.time_unit]
        mine = summary[summary["name"] == setting] if "name" in summary else summary.iloc[0:0]
        for endpoint in SPEEDUP_ENDPOINTS:
            e = verdict.ENDPOINTS[endpoint]
            row = {"setting": setting, "target_rule": e.target_rule, "target": e.target, "unit": fig.time_unit}
            hit = mine[mine["endpoint"] == endpoint] if "endpoint" in mine else mine.iloc[0:0]
            if hit.empty:
                row["status"] = f"missing: {fig.source}"
            else:
                r = hit.iloc[0]
                row.update(target_accuracy=100 * r["target_accuracy"],
                           t_grpo=None if pd.isna(r["t_baseline_s"]) else r["t_baseline_s"] / scale,
                           t_pods=None if pd.isna(r["t_method_s"]) else r["t_method_s"] / scale,
                           speedup=r["speedup"], ci_low=r["ci_low"], ci_high=r["ci_high"], verdict=r["verdict"],
                           status="ok" if pd.notna(r["speedup"]) else "not reached")
            rows.append(row)
    return pd.DataFrame.from_records(rows, columns=SPEEDUP_COLUMNS)


def ablation_table(evals: pd.DataFrame, summaries: pd.DataFrame) -> pd.DataFrame:
    """ablations.csv: accuracy at 0.5/2/4/6 h, peak, s/step, steps and time to GRPO's 99% target."""
    target_fig = PAPER_FIGURES[ABLATION_TARGET[0]]
    target_curves = figure_curves(evals, target_fig)
    rows = []
    for ablation, fig_name in ABLATIONS.items():
        fig = PAPER_FIGURES[fig_name]
        curves = figure_curves(evals, fig)
        if curves is None or target_curves is None:
            rows.append({"ablation": ablation, "method": None, "status": f"missing: {fig.source}"})
            continue
        base = target_curves[target_fig.methods[0]]
        bars = paper_step_times(evals, summaries, fig)
        for method, curve in curves.items():
            tt = analysis.time_to_target(base, curve, ABLATION_TARGET[1])
            later = curve["t"] > 0
            runs = summaries[(summaries["benchmark"] == fig.benchmark) & (summaries["hardware"] == fig.hardware)
                             & (summaries["method"] == method)]
            parsed = parse_method(method)
            row = {"ablation": ablation, "method": method, "rule": parsed.rule, "n": parsed.n, "m": parsed.m}
            for hours in ABLATION_TIMES_H:
                at = curve.loc[np.isclose(curve["t"], hours * 3600), "mean"]
                row[f"acc_{hours:g}h"] = 100 * float(at.iloc[0]) if len(at) else None
            row.update(peak=100 * float(curve.loc[later, "mean"].max()), s_per_step=bars.get(method),
                       steps=float(runs["steps"].mean()) if len(runs) else None, target_accuracy=100 * tt.target,
                       t_to_target_h=None if tt.t_method is None else tt.t_method / 3600,
                       status="ok" if tt.t_method is not None else "not reached")
            rows.append(row)
    return pd.DataFrame.from_records(rows)


def build_paper_outputs(runs_root: str | os.PathLike, out_dir: str | os.PathLike,
                        names: Iterable[str] | None = None, tables_dir: str | os.PathLike | None = None) -> dict:
    """Write the figures (PNG + PDF) into out_dir and the tables (TABLES: our summary of the
    authors' settings, speedups.csv, ablations.csv, curves.csv) into tables_dir (default out_dir).

    `names` are the figures to draw (all whose runs were imported by default); a requested figure
    whose runs are absent is an error, an unrequested one is reported missing in the tables.
    """
    out_dir = Path(out_dir)
    evals, _, summaries = analysis.load_runs(runs_root)
    drawn, missing, curve_rows = [], [], []
    requested = list(PAPER_FIGURES if names is None else names)
    for name in requested:
        if name not in PAPER_FIGURES:
            raise ValueError(f"unknown paper figure {name!r}; choose from {sorted(PAPER_FIGURES)}")
    for name, fig in PAPER_FIGURES.items():
        curves = figure_curves(evals, fig)
        if curves is None:
            if names is not None and name in requested:
                raise FileNotFoundError(f"figure {name} needs runs imported from {fig.source}")
            missing.append(name)
            continue
        lengths = figure_curves(evals, fig, value="mean_length")
        labels = {m: _label(m, fig, summaries) for m in fig.methods}
        for method in fig.methods:
            for value, table in (("accuracy", curves[method]), ("mean_length", lengths[method])):
                curve_rows.append(table.assign(figure=name, method=method, value=value))
        if name not in requested:
            continue
        bars = paper_step_times(evals, summaries, fig)
        bar_label = ("Seconds per Global Step\n(authors' formula, see docs/paper.md 4.1)"
                     if fig.design == "equal_generation" else "Seconds per Training Step")
        colors = {labels[m]: c for m, c in plots.method_colors(fig.methods).items()}
        scale = UNIT_S[fig.time_unit]
        plots.curve_figure({labels[m]: c for m, c in curves.items()}, out_dir / name, xlabel=fig.xlabel,
                           ylabel="Test Accuracy (%)", time_scale=scale, percent=True,
                           bars={labels[m]: v for m, v in bars.items()}, bar_label=bar_label,
                           xlim=(0, fig.horizon_s / scale), clip=(0, 100), colors=colors)
        plots.curve_figure({labels[m]: c for m, c in lengths.items()}, out_dir / f"{name}_length",
                           xlabel=fig.xlabel, ylabel="Average\nCompletion Length", time_scale=scale,
                           percent=False, xlim=(0, fig.horizon_s / scale), colors=colors)
        drawn.append(name)
    summary = paper_summary(evals, summaries)
    speedups = speedup_table(summary)
    ablations = ablation_table(evals, summaries)
    tables = Path(tables_dir or out_dir)
    analysis.write_csv(summary, tables / "summary.csv")
    atomic_write_text(tables / "summary.md", analysis.summary_markdown(summary) if len(summary) else "")
    analysis.write_csv(speedups, tables / "speedups.csv")
    analysis.write_csv(ablations, tables / "ablations.csv")
    curves_table = pd.concat(curve_rows, ignore_index=True) if curve_rows else pd.DataFrame()
    front = ["figure", "method", "value"]
    if not curves_table.empty:
        curves_table = curves_table[front + [c for c in curves_table.columns if c not in front]]
    analysis.write_csv(curves_table, tables / "curves.csv")
    return {"figures": drawn, "missing": missing, "speedups": speedups, "ablations": ablations, "summary": summary}


# --------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------
def _cmd_download(args) -> int:
    download_release(args.dest, load_manifest(args.manifest), url=args.url)
    print(f"release {RELEASE_COMMIT[:7]} results/ in {args.dest}")
    return 0


def _cmd_manifest(args) -> int:
    manifest = make_manifest(args.src)
    absent = [name for name, sha in manifest["files"].items() if sha is None]
    header = (f"# The authors' released results/ at the pinned commit: sha256 of every file the paper's\n"
              f"# figures use, made by `pods paper manifest --src {args.src}`.\n"
              "# A downloaded file whose sha256 differs is refused.\n")
    if absent:
        header += (f"# null: absent from that local copy ({len(absent)} files); such files are downloaded without\n"
                   f"# a pinned checksum and their sha256 is recorded in <dest>/SHA256SUMS.\n")
    atomic_write_text(args.out, header + yaml.safe_dump({"release": manifest}, sort_keys=False))
    print(f"{len(manifest['files']) - len(absent)} pinned, {len(absent)} unpinned -> {args.out}")
    return 0


def _cmd_import(args) -> int:
    report = import_release(args.src, args.out)
    print(f"imported {len(report['imported'])} settings into {args.out}/runs")
    for name, files in report["missing"].items():
        print(f"missing: {name} ({len(files)} files)")
    for note in report["notes"]:
        print(f"note: {note}")
    return 0


def _cmd_figures(args) -> int:
    result = build_paper_outputs(args.runs, args.out, names=args.figures, tables_dir=args.tables)
    print(f"figures: {', '.join(result['figures'])}")
    if result["missing"]:
        print(f"missing (runs not imported): {', '.join(result['missing'])}")
    print(analysis.to_markdown(result["speedups"]), end="")
    return 0


def add_arguments(p) -> None:
    sub = p.add_subparsers(dest="paper_command", metavar="STEP", required=True)
    d = sub.add_parser("download", help="fetch the release's results/ at the pinned commit, checksummed")
    d.add_argument("--dest", required=True)
    d.add_argument("--manifest", default=str(MANIFEST), help="YAML with repo, commit, url, files: {name: sha256}")
    d.add_argument("--url", default=None, help="URL template with {repo}, {commit}, {file} (default: GitHub raw)")
    d.set_defaults(func=_cmd_download)
    mf = sub.add_parser("manifest", help="write the checksum manifest from a local copy of the release")
    mf.add_argument("--src", required=True)
    mf.add_argument("--out", default=str(MANIFEST))
    mf.set_defaults(func=_cmd_manifest)
    i = sub.add_parser("import", help="release results/ -> <out>/runs/... in the run schema")
    i.add_argument("--src", required=True, help="folder with the release's results/ files")
    i.add_argument("--out", required=True)
    i.set_defaults(func=_cmd_import)
    f = sub.add_parser("figures", help="figures + speedups.csv + ablations.csv from imported runs")
    f.add_argument("--runs", required=True, help="the --out of `pods paper import`")
    f.add_argument("--out", default="figures/paper")
    f.add_argument("--tables", default=None, help="folder of the CSV/markdown tables (default: --out)")
    f.add_argument("--figures", nargs="+", default=None, choices=sorted(PAPER_FIGURES),
                   help="figures to draw (default: every one whose runs were imported)")
    f.set_defaults(func=_cmd_figures)
