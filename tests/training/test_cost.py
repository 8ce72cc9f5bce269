"""The cost clock: `pods cost` measures each arm's seconds per step by interleaved rounds, and a
run given its file trains a number of steps fixed by it and logs the cost clock beside the measured
one (docs/verdict.md, "The clock")."""
import json

import pytest

from helpers import config
from pods import cli
from pods.runs import read_jsonl
from pods.training.cost_clock import on_cost_clock, read_step_costs
from pods.training.trainer import train

pytestmark = pytest.mark.usefixtures("toy_task")


def test_pods_cost_measures_every_arm_in_interleaved_rounds(base, tmp_path, capsys):
    out = tmp_path / "cost.json"
    assert cli.main(["cost", "--no-progress", "benchmark=first_digit", f"base_model={base}", "prompts_per_step=2",
                     "max_new_tokens=4", "--methods", "grpo-n4-m4,pods-max_variance-n8-m4", "--rounds", "2",
                     "--steps", "2", "--warmup", "1", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    for name in ("grpo-n4-m4", "pods-max_variance-n8-m4"):
        arm = data["methods"][name]
        assert len(arm["round_means"]) == 2 and arm["s_per_step"] > 0 and arm["se"] >= 0
        assert arm["s_per_step"] == pytest.approx(sum(arm["round_means"]) / 2)
    # generating 8 rollouts a prompt costs more tokens than 4, whatever the clock says
    assert data["methods"]["pods-max_variance-n8-m4"]["tokens_generated_per_step"] > \
        data["methods"]["grpo-n4-m4"]["tokens_generated_per_step"]
    assert read_step_costs(out)["grpo-n4-m4"][0] == data["methods"]["grpo-n4-m4"]["s_per_step"]
    assert "grpo-n4-m4:" in capsys.readouterr().out
    # a bad arm stops before any compute, in one line
    assert cli.main(["cost", "--no-progress", "--methods", "grpo-n4", "--out", str(tmp_path / "x.json")]) == 2
    assert "is not of the form" in capsys.readouterr().err and not (tmp_path / "x.json").exists()


def test_a_run_on_the_cost_clock_trains_its_steps_and_logs_both_clocks(base, tmp_path):
    costs = tmp_path / "cost.json"
    costs.write_text(json.dumps({"methods": {"pods-max_variance-n8-m4": {"s_per_step": 0.5, "se": 0.01}}}))
    cfg = config(base, tmp_path / "run", "n=8", "m=4", "max_train_time_s=2.4", "eval_every_s=1.0",
                 f"step_cost_file={costs}")
    resolved = on_cost_clock(cfg)
    assert (resolved.max_steps, resolved.eval_every_steps, resolved.max_train_time_s, resolved.eval_every_s) == (5, 2,
                                                                                                                 None,
                                                                                                                 None)
    assert (resolved.step_cost_s, resolved.step_cost_se) == (0.5, 0.01)
    summary = train(cfg, progress_bar=False, log_every_s=None)
    evals = read_jsonl(tmp_path / "run" / "evals.jsonl", finished=True)
    assert [e["step"] for e in evals] == [0, 2, 4, 5] and [e["cost_time_s"] for e in evals] == [0.0, 1.0, 2.0, 2.5]
    assert all(e["train_time_s"] >= 0 for e in evals) and summary["step_cost_s"] == 0.5
    # the same command again finds the run finished (the budget resolves the same way)
    assert train(cfg, progress_bar=False, log_every_s=None)["steps"] == 5
    # an arm the file does not know is refused in one line
    with pytest.raises(ValueError, match="has no cost for grpo-n4-m4"):
        on_cost_clock(config(base, tmp_path / "other", "n=4", "m=4", "max_train_time_s=1", f"step_cost_file={costs}"))
    with pytest.raises(ValueError, match="not a `pods cost` file"):
        read_step_costs(tmp_path / "run" / "evals.jsonl")


def test_pods_cost_measures_cppo_and_greso_as_their_runs_train(base, tmp_path):
    """`pods cost` sets what a cppo- or greso- name decides (pods.training.config.variant_settings):
    CPPO's step draws n / k times the prompts and trains the update of GRPO n = 8, GRESO's is DAPO's
    with the filter, whose fields its steps log."""
    out = tmp_path / "cost.json"
    assert cli.main(["cost", "--no-progress", "benchmark=first_digit", f"base_model={base}", "prompts_per_step=2",
                     "max_new_tokens=4", "--methods", "grpo-n8-m8,cppo-n8-m2,greso-n8-m8", "--rounds", "2",
                     "--steps", "2", "--warmup", "1", "--out", str(out)]) == 0
    data = json.loads(out.read_text())["methods"]
    assert set(data) == {"grpo-n8-m8", "cppo-n8-m2", "greso-n8-m8"} and all(v["s_per_step"] > 0 for v in data.values())
    # CPPO generates 4x GRPO's rollouts (8 prompts x 8) for GRPO's update (8 x 2 = 2 x 8)
    assert data["cppo-n8-m2"]["tokens_generated_per_step"] > 2 * data["grpo-n8-m8"]["tokens_generated_per_step"]
