"""The core install (`pip install -e .`, no extras): the selector and the loss on torch and numpy
alone, and the TRL integration with the `trl` extra only. Each check runs in a fresh interpreter
whose site-packages lacks every module an extra brings, as an environment without the extras would
(scripts/wheel_check.sh also installs the wheel without extras into a fresh venv, in CI)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest
import tomllib
import torch

REPO = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def requirement_name(requirement: str) -> str:
    """`"trl>=1.9,!=1.15.0; python_version >= '3.11'"` -> `trl` (normalised as pip does)."""
    name = requirement.split(";")[0]
    for stop in "<>=!~[ ":
        name = name.split(stop)[0]
    return name.strip().lower().replace("_", "-")


def extra_modules(extras: list[str]) -> set[str]:
    """The top-level import names of every distribution the `extras` list (installed here)."""
    by_distribution: dict[str, set[str]] = {}
    for module, distributions in packages_distributions().items():
        for distribution in distributions:
            by_distribution.setdefault(distribution.lower().replace("_", "-"), set()).add(module)
    names = {requirement_name(r) for extra in extras for r in PYPROJECT["optional-dependencies"][extra]}
    return {module for name in names - {PYPROJECT["name"]} for module in by_distribution.get(name, ())}


def run_without(blocked: set[str], code: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """Run `code` in a fresh interpreter whose site-packages is this one's less the `blocked`
    top-level modules and their distributions' metadata: to the child (and to the probes of
    libraries such as transformers) they are simply not installed. The package comes from the
    checkout, not from the editable install's path hook."""
    site = Path(torch.__file__).resolve().parents[1]
    blocked_distributions = {d for module in blocked for d in packages_distributions().get(module, ())}
    blocked_metadata = {d.lower().replace("-", "_") for d in blocked_distributions}
    view = tmp_path / "site-packages"
    view.mkdir()
    for entry in site.iterdir():
        module = entry.name.split(".")[0]
        metadata = entry.name.rpartition("-")[0].lower().replace("-", "_") if entry.suffix == ".dist-info" else None
        if (module in blocked or metadata in blocked_metadata or entry.suffix == ".pth"
                or module.startswith("__editable__")):
            continue
        (view / entry.name).symlink_to(entry)
    env = dict(os.environ, PYTHONPATH=f"{REPO}{os.pathsep}{view}", PYTHONNOUSERSITE="1")
    return subprocess.run([sys.executable, "-S", "-c", textwrap.dedent(code)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)


def test_the_core_depends_on_torch_and_numpy_only():
    assert sorted(requirement_name(r) for r in PYPROJECT["dependencies"]) == ["numpy", "torch"]
    # the README's install (`.[dev]`) still brings everything the embedded study and the tests use
    dev = {requirement_name(r) for r in PYPROJECT["optional-dependencies"]["dev"]}
    assert {PYPROJECT["name"]} <= dev
    assert any(r.startswith(f"{PYPROJECT['name']}[study") for r in PYPROJECT["optional-dependencies"]["dev"])


def test_selector_and_loss_import_and_run_without_any_extra(tmp_path):
    blocked = extra_modules(["study", "trl", "track", "gpu", "dev"])
    assert {"snakemake", "pandas", "matplotlib", "yaml", "transformers", "trl"} <= blocked  # the guard is real
    result = run_without(blocked, """
        import sys
        import torch
        from pods.selection import select
        from pods.grpo import kept_advantages, policy_loss
        from pods.selection import SELECTION_RULES

        rewards = torch.tensor([[0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 1.0, 1.0]])
        kept = select(rewards, 4)
        assert sorted(rewards[0, kept[0]].tolist()) == [0.0, 0.0, 1.0, 1.0], kept
        advantages = kept_advantages(rewards, kept)
        logprobs = torch.zeros(4, 3, requires_grad=True)
        loss, _ = policy_loss(logprobs, logprobs.detach(), advantages.reshape(-1), torch.ones(4, 3))
        loss.backward()
        try:
            import pandas  # noqa: F401
        except ModuleNotFoundError:
            pass
        else:
            raise SystemExit("the guard let pandas through")
        assert not any(m.startswith(("pods.training", "pods.study", "pods.paper")) for m in sys.modules)
        print("core ok", sorted(SELECTION_RULES))
    """, tmp_path)
    assert result.returncode == 0, result.stderr
    assert "core ok" in result.stdout


def test_the_command_line_without_the_study_extra_says_which_extra_in_one_line(tmp_path):
    result = run_without(extra_modules(["study", "gpu", "dev", "track"]), """
        import sys
        from pods.cli import main
        sys.exit(main(["analyze", "--help"]))
    """, tmp_path)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "pip install -e '.[study]'" in lines[0], result.stderr


def test_the_trl_integration_needs_the_trl_extra_only(tmp_path):
    pytest.importorskip("trl")
    trl_and_its_requirements = _requirements_closure("trl")
    blocked = extra_modules(["study", "track", "gpu"]) - trl_and_its_requirements
    assert {"snakemake", "matplotlib", "reasoning_gym", "math_verify"} <= blocked
    result = run_without(blocked, """
        import sys
        from pods.integrations.trl import PODSGRPOConfig, PODSGRPOTrainer  # noqa: F401
        assert not any(m.startswith(("pods.training", "pods.study", "pods.paper")) for m in sys.modules)
        print("trl ok")
    """, tmp_path)
    assert result.returncode == 0, result.stderr
    assert "trl ok" in result.stdout


def _requirements_closure(distribution: str) -> set[str]:
    """Top-level modules of `distribution` and of everything it requires, transitively (installed ones)."""
    from importlib.metadata import PackageNotFoundError, requires

    modules_of: dict[str, set[str]] = {}
    for module, distributions in packages_distributions().items():
        for d in distributions:
            modules_of.setdefault(d.lower().replace("_", "-"), set()).add(module)
    seen, todo = set(), [distribution]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            wanted = requires(name) or []
        except PackageNotFoundError:
            continue
        todo += [requirement_name(r) for r in wanted if "extra ==" not in r]
    return {module for name in seen for module in modules_of.get(name, ())}


def test_the_distribution_has_a_name_of_its_own_and_no_install_line_names_pypis_pods():
    """PyPI's `pods` is an unrelated project (Open Data Science) that also imports as `pods`: ours is
    `pods-rollouts`, and no document, config or message tells anyone to `pip install pods...`."""
    from pods import cli

    assert PYPROJECT["name"] == cli.DISTRIBUTION != "pods"
    assert PYPROJECT["description"].startswith(cli.SUMMARY)
    bad = []
    for path in [REPO / "README.md", REPO / "environment.yml", *(REPO / "docs").glob("*.md"),
                 *(REPO / "pods").rglob("*.py"), *(REPO / "config").rglob("*.yaml"),
                 *(REPO / "profiles").rglob("*.yaml"),
                 *(REPO / "scripts").glob("*.sh"), *(REPO / "benchmarks").rglob("*.sh"),
                 *(REPO / "examples").glob("*.py")]:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"pip install[^`|&;]*?[\s'\"]pods(\[|[\s'\"`]|$)", line):
                bad.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert not bad, "\n".join(bad)


class _Distribution:
    def __init__(self, summary, version, installer="pip"):
        self.metadata, self.version, self.installer = {"Summary": summary}, version, installer

    def read_text(self, name):
        return f"{self.installer}\n" if name == "INSTALLER" and self.installer else None


def test_the_command_line_refuses_in_one_line_when_pypis_pods_is_installed_too(monkeypatch, capsys):
    from pods import cli

    monkeypatch.setattr(cli.importlib.metadata, "distribution",
                        lambda name: _Distribution("Open Data Science", "0.1.19"))
    assert cli.main(["analyze", "--help"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "'pods' 0.1.19 (Open Data Science)" in lines[0] and "pip uninstall pods" in lines[0]
    # an install of this project under its old name: alone it is the only `pods`; beside the renamed
    # one, either may be imported (it was: a stale editable install ran another checkout's code)
    old_name = _Distribution(PYPROJECT["description"], "0.1.0")
    monkeypatch.setattr(cli.importlib.metadata, "distribution",
                        lambda name: old_name if name == "pods" else _missing(name))
    assert cli.foreign_pods() is None
    monkeypatch.setattr(cli.importlib.metadata, "distribution", lambda name: old_name)
    assert cli.main(["analyze", "--help"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "before its rename" in lines[0] and lines[0].endswith("pip uninstall pods")
    # a build's leftover metadata (an old pods.egg-info in the checkout, read from the working
    # directory) is not an installed distribution: nothing to uninstall, nothing refused
    monkeypatch.setattr(cli.importlib.metadata, "distribution",
                        lambda name: _Distribution(PYPROJECT["description"], "0.1.0", installer=None))
    assert cli.foreign_pods() is None


def _missing(name):
    raise __import__("importlib.metadata").metadata.PackageNotFoundError(name)
