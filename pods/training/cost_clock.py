"""The cost clock of one run (docs/verdict.md, "The clock"): a `pods cost` file read, and a run's
time budgets turned into steps of its arm's measured seconds per step. A leaf: the trainer applies
it before anything else, `pods cost` (pods.training.cost) writes the files it reads."""
from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path


def read_step_costs(path: str | Path) -> dict[str, tuple[float, float]]:
    """method -> (seconds per step, standard error) from a `pods cost` file; one clear error if it
    is not one."""
    try:
        methods = json.loads(Path(path).read_text())["methods"]
        return {name: (float(v["s_per_step"]), float(v["se"])) for name, v in methods.items()}
    except FileNotFoundError:
        raise ValueError(f"no step-cost file {path} (`pods cost` writes it)") from None
    except (KeyError, TypeError, ValueError, json.JSONDecodeError) as err:
        raise ValueError(f"{path}: not a `pods cost` file ({err})") from None


def on_cost_clock(cfg):
    """The run's config on the cost clock (a TrainConfig; unchanged without step_cost_file or
    step_cost_s): its time budgets turned into steps of this method's cost c, so that the run is a
    function of its seed whatever else the machine runs. Refused in one line when the file lacks
    the method."""
    if cfg.step_cost_file is None and cfg.step_cost_s is None:
        return cfg
    c, se = cfg.step_cost_s, cfg.step_cost_se
    if c is None:
        costs = read_step_costs(cfg.step_cost_file)
        if cfg.method not in costs:
            raise ValueError(f"step_cost_file {cfg.step_cost_file} has no cost for {cfg.method} "
                             f"(it has {', '.join(sorted(costs))}); run `pods cost` with this method")
        c, se = costs[cfg.method]
    changes = {"step_cost_s": c, "step_cost_se": se}
    if cfg.max_train_time_s is not None:
        changes.update(max_steps=math.ceil(cfg.max_train_time_s / c), max_train_time_s=None)
    if cfg.eval_every_s is not None:
        changes.update(eval_every_steps=max(1, round(cfg.eval_every_s / c)), eval_every_s=None)
    return dataclasses.replace(cfg, **changes)
