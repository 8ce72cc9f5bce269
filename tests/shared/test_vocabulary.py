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
    ("cppo-n16-m4", Method("max_abs_advantage", 16, 4, False, "cppo")),
    ("greso-n16-m16", Method("identity", 16, 16, True, "greso")),
    ("greso-max_variance-n64-m16", Method("max_variance", 64, 16, True, "greso")),
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


def test_every_existing_name_keeps_its_method_and_the_new_ones_their_own():
    """The names of the committed runs parse to what they always did (no variant); the new prefixes
    parse only in their own forms, and the label says which method a curve is."""
    for name, fields in [("grpo-n16-m16", ("identity", 16, 16, False)), ("grpo-n64-m64", ("identity", 64, 64, False)),
                         ("pods-max_variance-n64-m16", ("max_variance", 64, 16, False)),
                         ("pods-max_abs_advantage-n64-m16", ("max_abs_advantage", 64, 16, False)),
                         ("dapo-n16-m16", ("identity", 16, 16, True)),
                         ("dapo-max_variance-n64-m16", ("max_variance", 64, 16, True))]:
        method = parse_method(name)
        assert tuple(method)[:4] == fields and method.variant == "" and method.name == name
        assert method.prompt_share == 1 and method.update_width == method.m
    assert parse_method("cppo-n16-m4").label == "CPPO (n=16, k=4)"
    assert parse_method("greso-n16-m16").label == "GRESO (n=16, m=16)"
    assert parse_method("greso-max_variance-n64-m16").label == "GRESO + PODS max_variance (n=64, m=16)"
    assert not parse_method("greso-n16-m16").is_grpo and not parse_method("cppo-n16-m4").is_grpo
    for bad in ("cppo-max_abs_advantage-n16-m4", "cppo-n16-m16", "greso-n16-m8", "grpo-max_variance-n16-m4"):
        with pytest.raises(ValueError):
            parse_method(bad)
    with pytest.raises(ValueError, match="needs dynamic=True"):
        method_name("identity", 16, 16, False, "greso")
    with pytest.raises(ValueError, match="unknown method variant"):
        method_name("identity", 16, 16, False, "ppo")
    assert method_for(16, 4, "max_abs_advantage", variant="cppo").name == "cppo-n16-m4"


def test_cppo_holds_the_update_of_grpo_and_the_generation_of_pods():
    """cppo-n16-m4 at 8 prompts per step trains 32 x 4 = 128 rows (GRPO n = 16's 8 x 16) and generates
    32 x 16 = 512 (PODS 64 -> 16's 8 x 64): equal_update against both, equal_generation against PODS."""
    grpo, pods, cppo = (parse_method(name) for name in ("grpo-n16-m16", "pods-max_variance-n64-m16", "cppo-n16-m4"))
    update, generation = Design("equal_update"), Design("equal_generation")
    assert update.violation(Arm(grpo, 16), Arm(cppo, 16)) is None
    assert update.violation(Arm(pods, 64), Arm(cppo, 16)) is None
    assert generation.violation(Arm(pods, 64), Arm(cppo, 16)) is None
    assert "equal_generation" in generation.violation(Arm(grpo, 16), Arm(cppo, 16))
    assert update.violation(Arm(grpo, 16), Arm(parse_method("cppo-n16-m8"), 16)) is None  # any k: n rows per slot
    assert "trains m=32 per prompt of prompts_per_step (CPPO)" in update.violation(
        Arm(grpo, 16), Arm(parse_method("cppo-n32-m8"), 32))
