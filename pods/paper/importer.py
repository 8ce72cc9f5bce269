"""The authors' release files imported as run directories of the run schema (docs/contracts.md):
single-GPU JSON files and the 8-GPU wandb exports; the mapping is in `pods.paper`'s docstring."""
from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from pods import runs as runfiles
from pods.atomic import atomic_write_text, write_json, write_yaml
from pods.paper.release import (
    CLUSTERS,
    FAMILIES,
    RELEASE_COMMIT,
    RELEASE_REPO,
    RUNS_PER_SETTING,
    SINGLE_GPU_HARDWARE,
    SINGLE_GPU_SETTINGS,
    Cluster,
    Family,
    setting_method,
    setting_prefix,
)
from pods.vocabulary import RUN_KEY, method_for, parse_method, run_path

CHECKPOINT_RE = re.compile(r"^checkpoint-(\d+)$")
WANDB_COLUMN_RE = re.compile(
    r"^data/(?P<prefix>[A-Za-z0-9]+)-s(?P<seed>\d+)-p(?P<p>\d+)-n(?P<n>\d+)-m(?P<m>\d+)-ga(?P<ga>\d+)"
    r" - (?P<metric>.+?)(?P<agg>__MIN|__MAX)?$"
)
N_ITEMS = {"gsm8k": 1319, "math500": 496, "amc23": 40}  # after the <= 512-token prompt filter

# --------------------------------------------------------------------------------------------
# Import into the run schema
# --------------------------------------------------------------------------------------------
def _read_json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from None  # "...: line L column C (char N)"


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
    run_dir = Path(run_path(str(out / "runs"), **{k: identity[k] for k in RUN_KEY}))
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
        method = method_for(n, m, "max_variance").name
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
        run_dir = Path(run_path(str(out / "runs"), benchmark="gsm8k", hardware=cluster.hardware,
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


