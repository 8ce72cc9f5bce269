"""What every step-cost script of the GPU kit ends with: the phase table on stdout and the cost file
`pods project --costs` reads (seconds per step of each method, by phase, and how they were measured).
Shared by step_costs.py (our engines) and verl_step_costs.py (verl's trainer); torch and the
package's vocabulary only, so it imports in either environment."""
from __future__ import annotations

import json
import platform
from pathlib import Path

from pods.vocabulary import method_for


def report(rows: dict, arms: dict, phases, *, out: str | None, hardware: str, device: str, settings: dict) -> None:
    """rows: arm label -> {phase: s, "step": s}; arms: label -> (n, m). Prints the table; writes the
    cost file to `out` when given."""
    import torch

    cols = [*phases, "step"]
    print("| arm | " + " | ".join(f"{c} s" for c in cols) + " |")
    print("|---|" + "---|" * len(cols))
    for label, row in rows.items():
        print(f"| {label} | " + " | ".join(f"{row[c]:.3f}" for c in cols) + " |")
    if not out:
        return
    methods = {label: method_for(n, m, "max_variance").name for label, (n, m) in arms.items()}
    device_name = torch.cuda.get_device_name() if device.startswith("cuda") else platform.processor()
    costs = {
        "hardware": hardware, "device": device_name,
        "s_per_step": {methods[label]: row["step"] for label, row in rows.items()},
        "phase_s_per_step": {methods[label]: {p: row[p] for p in phases} for label, row in rows.items()},
        "settings": {**settings, "torch": torch.__version__},
    }
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(costs, indent=2) + "\n")
    print(f"phase costs -> {out} (pods project --costs {out})")
