"""Every name -> object table of the package is a `pods.registry.Registry`: a second entry under a
name is refused, and an unknown name lists the names there are."""
import pytest

from pods.grpo import LOSS_AGGREGATIONS
from pods.registry import Registry
from pods.selection import SELECTION_RULES
from pods.study.curves import ALIGNERS
from pods.study.hardware import LAUNCHERS
from pods.study.stats import ADJUSTMENTS, BOOTSTRAP_INTERVALS, SEED_STATISTICS, TIME_RULES
from pods.study.verdict import ENDPOINTS
from pods.training.rollout import ROLLOUT_ENGINES
from pods.training.tasks import TASKS
from pods.training.tasks.rewards import METRICS, REWARDS
from pods.training.update import UPDATE_ENGINES

REGISTRIES = [SELECTION_RULES, LOSS_AGGREGATIONS, ROLLOUT_ENGINES, UPDATE_ENGINES, TASKS, REWARDS, METRICS,
              LAUNCHERS, ALIGNERS, TIME_RULES, SEED_STATISTICS, BOOTSTRAP_INTERVALS, ADJUSTMENTS, ENDPOINTS]


@pytest.mark.parametrize("registry", REGISTRIES, ids=lambda r: r.kind)
def test_every_registry_refuses_a_taken_name_and_lists_its_names(registry):
    assert isinstance(registry, Registry) and len(registry) >= 1
    name = registry.names()[0]
    with pytest.raises(ValueError, match=f"{registry.kind} {name!r} is registered twice"):
        registry.add(name, registry[name])
    with pytest.raises(ValueError, match=f"{registry.kind} {name!r} is registered twice"):
        registry[name] = registry[name]
    with pytest.raises(ValueError,
                       match=f"unknown {registry.kind} 'no-such-name'; choose from " + ", ".join(sorted(registry))):
        registry["no-such-name"]


def test_the_engines_are_each_registered_once():
    assert ROLLOUT_ENGINES.names() == ["hf", "hf_static", "vllm"]
    assert UPDATE_ENGINES.names() == ["torch", "lora", "deepspeed"]


def test_a_registry_built_from_a_mapping_and_by_decorator():
    reg = Registry("colour", {"red": 1})

    @reg.register("blue")
    def blue():
        return 2

    assert reg["blue"]() == 2 and "red" in reg and reg.get("green") is None
    del reg["red"]
    assert reg.names() == ["blue"]
