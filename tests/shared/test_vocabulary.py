"""The run vocabulary (pods.vocabulary): the one test that spells the run layout by hand (every other
test builds paths with `run_path`), method names both ways, and what each design holds equal."""
from __future__ import annotations

import pytest

from pods.vocabulary import (
    DESIGNS,
    METHOD_PATTERN,
    RUN_GLOB,
    Arm,
    Design,
    Method,
    method_for,
    method_name,
    parse_method,
    parse_run_path,
    run_path,
)


def test_the_run_layout_and_its_inverse():
    path = run_path("results/runs", benchmark="gsm8k", hardware="l40s-lora", method="pods-max_variance-n64-m16", seed=3)
    assert path == "results/runs/gsm8k/l40s-lora/pods-max_variance-n64-m16/seed3"  # the oracle
    assert parse_run_path(path) == {"benchmark": "gsm8k", "hardware": "l40s-lora",
                                    "method": "pods-max_variance-n64-m16", "seed": 3}
    assert RUN_GLOB == "*/*/*/seed*"
    with pytest.raises(ValueError, match="does not end in seed<k>"):
        parse_run_path("results/runs/gsm8k/l40s-lora/pods-max_variance-n64-m16/run3")
    with pytest.raises(ValueError, match="is not of the form"):
        parse_run_path("results/runs/gsm8k/l40s-lora/ppo-n64-m16/seed3")


@pytest.mark.parametrize("name, method", [
    ("grpo-n16-m16", Method("identity", 16, 16)),
    ("pods-max_variance-n64-m16", Method("max_variance", 64, 16)),
    ("dapo-n16-m16", Method("identity", 16, 16, True)),
    ("dapo-random-n8-m4", Method("random", 8, 4, True)),
])
def test_method_names_both_ways(name, method):
    import re

    assert parse_method(name) == method and method.name == name and method_name(*method) == name
    assert re.fullmatch(METHOD_PATTERN, name)


def test_method_for_keeps_every_rollout_with_identity_when_m_equals_n():
    assert method_for(16, 16, "max_variance") == Method("identity", 16, 16)
    assert method_for(64, 16, "max_variance").name == "pods-max_variance-n64-m16"
    with pytest.raises(ValueError, match="needs m == n"):
        method_for(16, 8, "identity")
    with pytest.raises(ValueError, match="1 <= m <= n"):
        method_for(4, 8, "random")


def test_each_design_checks_what_its_arms_hold_equal():
    grpo, pods = parse_method("grpo-n16-m16"), parse_method("pods-max_variance-n64-m16")
    assert DESIGNS == ("equal_update", "equal_generation")
    assert Design("equal_update").violation(Arm(grpo, 16), Arm(pods, 64)) is None
    assert "equal_generation generates as many rollouts per prompt" in Design("equal_generation").violation(
        Arm(grpo, 16), Arm(pods, 64))
    ga = parse_method("grpo-n64-m64")
    assert Design("equal_generation").violation(Arm(ga, 64), Arm(pods, 64)) is None
    assert "equal_update trains the same m" in Design("equal_update").violation(Arm(ga, 64), Arm(pods, 64))
