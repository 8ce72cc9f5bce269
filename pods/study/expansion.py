"""A study's comparisons expanded into runs: one `Comparison` row per (comparison, benchmark,
hardware, method), its arms' `Run`s, and the checks of what the schema cannot see (a declared
benchmark, a known rule, the arms of a design)."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Callable

from pods.study.schema import StudyError
from pods.vocabulary import Arm, Design, parse_method

# Comparison keys that only the analysis reads (the study-file format of pods.study.analysis).
ANALYSIS_KEYS = ("grid_s", "t_max_s", "eval_set", "align", "target_accuracy", "axis", "pairing")
# Comparison names with a figure of their own (pods.study.plots): `main` (accuracy per design) and the
# paper's ablations; every other name is a family drawn with all its arms (the alternatives).
ABLATIONS = ("n_scaling", "m_scaling", "rule")
PLOT_KINDS = ("accuracy", *ABLATIONS, "length", "step_time")
# m_scaling varies m on purpose, and is read against the baseline's target only.
UNCHECKED_DESIGN = ("m_scaling",)


def figure_panels(rows: list[Mapping]) -> list[tuple[str, str, str, str]]:
    """(kind, benchmark, hardware, suffix) of every figure of a study whose comparison rows
    (`Comparison.row`, the study file's) are `rows`, in order: every `main` row an accuracy figure
    per design (suffix `-<design>`), an ablation's row its ablation figure (no suffix), a row of any
    other name (the alternatives) one figure of all its arms per axis (suffix `-<axis>`), and every
    (benchmark, hardware) its completion lengths and seconds per step."""
    panels = []
    for row in rows:
        if row["name"] == "main":
            panels.append(("accuracy", row["benchmark"], row["hardware"], "-" + row["design"]))
        elif row["name"] in ABLATIONS:
            panels.append((row["name"], row["benchmark"], row["hardware"], ""))
        else:
            panels.append((row["name"], row["benchmark"], row["hardware"], "-" + row.get("axis", "time")))
        panels += [(kind, row["benchmark"], row["hardware"], "") for kind in ("length", "step_time")]
    return list(dict.fromkeys(panels))


@dataclass(frozen=True, order=True)
class Run:
    """One training run: the four components of its run directory."""

    benchmark: str
    hardware: str
    method: str
    seed: int


def run_from(wildcards: Any) -> Run:
    """The Run of a train job's wildcards."""
    return Run(wildcards.benchmark, wildcards.hardware, wildcards.method, int(wildcards.seed))


@dataclass(frozen=True)
class Comparison:
    """One (comparison, benchmark, hardware, method) row of the study file pods.study.analysis reads."""

    name: str
    design: str
    benchmark: str
    hardware: str
    baseline: str
    method: str
    seeds: tuple[int, ...]
    analysis: Mapping[str, Any] = field(default_factory=dict)  # ANALYSIS_KEYS
    where: str = field(default="", compare=False)  # `comparisons[i].methods[j]`, for error messages

    def row(self) -> dict:
        return dict(name=self.name, design=self.design, benchmark=self.benchmark, hardware=self.hardware,
                    baseline=self.baseline, method=self.method, seeds=list(self.seeds), **self.analysis)

    def runs(self) -> list[Run]:
        return [Run(self.benchmark, self.hardware, method, seed)
                for method in (self.baseline, self.method) for seed in self.seeds]


def expand(config: Mapping, check_hardware: Callable[[str], Any]) -> list[Comparison]:
    """Every comparison of a validated study config as rows; StudyError names the first problem.
    `check_hardware(name)` raises StudyError for a profile that cannot be loaded."""
    from pods.selection import SELECTION_RULES  # torch: the study's runs are resolved, not just read

    rows = []
    for i, comp in enumerate(config["comparisons"]):
        where = f"comparisons[{i}]"
        if comp["baseline"] in comp["methods"]:
            raise StudyError(f"{where}.methods: {comp['baseline']!r} is also the baseline; a run is not "
                             f"compared with itself")
        arms = [("baseline", comp["baseline"]), *((f"methods[{j}]", m) for j, m in enumerate(comp["methods"]))]
        for key, method in arms:
            try:  # the form here, the rule in the selection registry (the schema spells no rule names)
                SELECTION_RULES[parse_method(method).rule]
            except ValueError as exc:
                raise StudyError(f"{where}.{key}: {exc}") from None
        seeds = comp.get("seeds", config["seeds"])
        seeds = tuple(range(seeds)) if isinstance(seeds, int) else tuple(seeds)  # a count N: 0 .. N-1
        for label in comp["benchmarks"]:
            if label not in config["benchmarks"]:
                raise StudyError(f"{where}.benchmarks: {label!r} is not declared under `benchmarks`")
        for label in comp["hardware"]:
            try:
                check_hardware(label)
            except StudyError as exc:
                raise StudyError(f"{where}.hardware: {exc}") from None
        analysis = {key: comp[key] for key in ANALYSIS_KEYS if key in comp}
        if config.get("clock") == "cost":  # runs timed by the cost clock are read on it
            analysis.setdefault("axis", "cost")

        def for_benchmark(label: str) -> dict:
            # a benchmark's fixed quality target applies to its comparisons unless one sets its own
            target = config["benchmarks"][label].get("target_accuracy")
            return {**({"target_accuracy": target} if target is not None else {}), **analysis}

        rows += [Comparison(comp["name"], comp["design"], benchmark, hardware, comp["baseline"], method,
                            seeds, for_benchmark(benchmark), where=f"{where}.methods[{j}]")
                 for benchmark in comp["benchmarks"] for hardware in comp["hardware"]
                 for j, method in enumerate(comp["methods"])]
    return rows


def check_design(comparison: Comparison, arm: Callable[[Run], Arm]) -> None:
    """The arms hold equal what the comparison's design says (`pods.vocabulary.Design`), each as its
    trainer resolves it (`arm(run)`); StudyError otherwise."""
    if comparison.name in UNCHECKED_DESIGN:
        return
    baseline, method = (arm(Run(comparison.benchmark, comparison.hardware, name, comparison.seeds[0]))
                        for name in (comparison.baseline, comparison.method))
    problem = Design(comparison.design).violation(baseline, method)
    if problem:
        raise StudyError(f"{comparison.where} on {comparison.benchmark}/{comparison.hardware}: {problem}")
