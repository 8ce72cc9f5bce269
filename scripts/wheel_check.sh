#!/usr/bin/env bash
# The package as a user installs it from a wheel: built with `python -m build`, installed into
# fresh virtual environments outside the checkout (with torch pinned as the README says), and run
# from a folder that holds no source:
#   the core alone (the wheel without extras): torch and numpy and nothing of the extras; the selector
#     and the loss run, and `pods` says in one line that the command line needs the study extra;
#   with the study extra: `pods --help`, `pods analyze` on a copy of the committed results/ (its
#     tables must come out byte for byte as committed). Every file the package reads (the study
#     schema, the release manifest) must be package data.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d -t pods-wheel-XXXXXX)
trap 'rm -rf "$work"' EXIT

python -m build --wheel --outdir "$work/dist" "$repo" > "$work/build.log" 2>&1 || { tail -30 "$work/build.log"; exit 1; }
wheel=$(ls "$work"/dist/pods_rollouts-*.whl)
echo "wheel: $(basename "$wheel") ($(du -k "$wheel" | cut -f1) KiB)"

python -m venv "$work/core"
"$work/core/bin/python" -m pip install --quiet "torch==2.13.0" "$wheel"
(cd "$work" && "$work/core/bin/python" - <<'PY'
import importlib.util
import torch
from pods.grpo import kept_advantages
from pods.selection import select

absent = ("snakemake", "pandas", "matplotlib", "scipy", "yaml", "transformers", "datasets", "reasoning_gym",
          "math_verify", "trl")
brought = [name for name in absent if importlib.util.find_spec(name) is not None]
assert not brought, f"the core install brought {brought}"
rewards = torch.tensor([[0.0, 1.0, 1.0, 0.0, 1.0, 0.0]])
kept = select(rewards, 2)
assert sorted(rewards[0, kept[0]].tolist()) == [0.0, 1.0], kept
print("core install:", sorted(kept_advantages(rewards, kept)[0].tolist()), "without", ", ".join(absent))
PY
) || exit 1
if "$work/core/bin/pods" --help > "$work/core.log" 2>&1 || ! grep -qF "'.[study]'" "$work/core.log"; then
    echo "the core install's pods command should refuse in one line naming the study extra:"; cat "$work/core.log"; exit 1
fi

python -m venv "$work/venv"
"$work/venv/bin/python" -m pip install --quiet "torch==2.13.0" "$wheel[study]"

cd "$work"  # no checkout on the path: the package is the installed one
"$work/venv/bin/python" - <<'PY'
import pods
assert "site-packages" in pods.__file__, pods.__file__
from pods.paper.release import load_manifest
from pods.selection import select
from pods.study.schema import load_schema
import torch

rewards = torch.tensor([[0.0, 1.0, 1.0, 0.0, 1.0, 0.0]])
kept = select(rewards, 2)  # max variance: one right and one wrong rollout
assert kept.shape == (1, 2) and sorted(rewards[0, kept[0]].tolist()) == [0.0, 1.0], kept
print("installed:", pods.__file__)
print("schema keys:", len(load_schema()["properties"]), "| release files pinned:", len(load_manifest()["files"]))
PY
"$work/venv/bin/pods" --help > /dev/null
cp -r "$repo/results" "$work/results"
"$work/venv/bin/pods" analyze --runs results/runs --study results/study.yaml --out "$work/out/summary.csv" \
    > "$work/analyze.log" 2>&1 || { tail -20 "$work/analyze.log"; exit 1; }
for table in summary.csv summary.md; do
    cmp "$work/out/$table" "$repo/results/$table" || { echo "pods analyze from the wheel: $table differs"; exit 1; }
done
echo "wheel check: the core alone (select, kept_advantages; no extras), and with the study extra pods --help, pods analyze (tables as committed): ok"
