"""Hardware profiles (`config/hardware/<name>.yaml`) and the launchers that start a run's processes."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from pods.registry import Registry

# profile -> the command that runs `pods <command>` on every process of a run. launcher_prefix and
# launcher_args go in verbatim (not quoted) so that they can use the job's environment
# ($SLURM_JOB_NODELIST, $MASTER_ADDR, ...) for a multi-node rendezvous.
LAUNCHERS: Registry[Callable[["HardwareProfile"], str]] = Registry("launcher", {
    "none": lambda p: "pods",
    "accelerate": lambda p: (
        f"accelerate launch --num_processes {p.num_processes * p.nodes} --num_machines {p.nodes} "
        f"{p.launcher_args} -m pods.cli"
    ),
    "torchrun": lambda p: (
        f"torchrun --nnodes {p.nodes} --nproc_per_node {p.num_processes} {p.launcher_args} -m pods.cli"
    ),
    "deepspeed": lambda p: (
        f"deepspeed --num_nodes {p.nodes} --num_gpus {p.num_processes} {p.launcher_args} --module pods.cli"
    ),
})


@dataclass(frozen=True)
class HardwareProfile:
    """`{hardware_dir}/<name>.yaml`; keys, types and defaults are schema.yaml#/definitions/hardware_profile
    (`pods.study.plan.Study.profile` reads and checks the file)."""

    name: str
    path: Path
    launcher: str
    threads: int
    resources: Mapping[str, int | str]
    num_processes: int
    nodes: int
    launcher_args: str
    launcher_prefix: str
    train: Mapping[str, Any]
    description: str = ""

    def launch_prefix(self) -> str:
        """What goes before `train ...`: the launcher (and its prefix) that starts every process."""
        return " ".join(f"{self.launcher_prefix} {LAUNCHERS[self.launcher](self)}".split())
