"""Where a run lives: the one definition of a run directory's path under a study's runs folder.

It imports nothing, so that every side (the trainer's default `run_dir`, the run-file readers, the
workflow's job patterns and the analysis' search for runs) can spell the layout from here.
"""
from __future__ import annotations

from typing import Any

# the components of a run's identity, in the order of its path
RUN_KEY = ("benchmark", "hardware", "method", "seed")
# Where a run lives under a study's runs folder; `pods.runs.run_key` reads the components back.
RUN_LAYOUT = "{benchmark}/{hardware}/{method}/seed{seed}"
# every run directory under a runs folder, as a glob pattern
RUN_GLOB = RUN_LAYOUT.format(**{component: "*" for component in RUN_KEY})


def run_path(runs_dir: str, **key: Any) -> str:
    """`{runs_dir}/{benchmark}/{hardware}/{method}/seed{seed}` (as text: Snakemake patterns use it too)."""
    return f"{runs_dir}/{RUN_LAYOUT.format(**key)}"
