"""Fixtures shared by the test modules; the plain helpers under them are in helpers.py.

`base` is the tiny saved base model of the toy task. Modules that need a model of another shape
(test_trl, test_bnb, test_vllm_engine) define a `base` of their own, which takes precedence there.
`toy_task` registers the toy task as benchmark `first_digit`; modules that train on it request it
for every test with `pytestmark = pytest.mark.usefixtures("toy_task")`.
"""
from pathlib import Path

import pytest

import pods

# The suite tests this checkout: if `import pods` reads another one (a stale editable install of
# another folder wins the import), every result below would be about that other code.
_CHECKOUT = Path(__file__).resolve().parents[1]
if Path(pods.__file__).resolve().parents[1] != _CHECKOUT:
    pytest.exit(f"`import pods` reads {Path(pods.__file__).resolve().parent}, not this checkout {_CHECKOUT}: "
                "pip uninstall pods pods-rollouts, then pip install -e . here", returncode=3)


@pytest.fixture(scope="session")
def base(tmp_path_factory):
    from helpers import save_tiny_base  # here, not at the top: the core's own environments (verl's) lack the study

    # built once: training reads it and writes only to its own run folder
    return save_tiny_base(tmp_path_factory.mktemp("base"))


@pytest.fixture
def toy_task(monkeypatch):
    import pods.training.tasks
    from helpers import FirstDigit

    monkeypatch.setitem(pods.training.tasks.TASKS, "first_digit", FirstDigit)
