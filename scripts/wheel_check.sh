#!/usr/bin/env bash
# The package as a user installs it from a wheel: built with `python -m build`, installed into a
# fresh virtual environment outside the checkout (with torch pinned as the README says), and run
# from a folder that holds no source: `pods --help`, `pods analyze` on a copy of the committed
# results/ (its tables must come out byte for byte as committed), and the selector's import.
# Every file the package reads (the study schema, the release manifest) must be package data.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d -t pods-wheel-XXXXXX)
trap 'rm -rf "$work"' EXIT

python -m build --wheel --outdir "$work/dist" "$repo" > "$work/build.log" 2>&1 || { tail -30 "$work/build.log"; exit 1; }
wheel=$(ls "$work"/dist/pods-*.whl)
echo "wheel: $(basename "$wheel") ($(du -k "$wheel" | cut -f1) KiB)"
python -m venv "$work/venv"
"$work/venv/bin/python" -m pip install --quiet "torch==2.13.0" "$wheel"

cd "$work"  # no checkout on the path: the package is the installed one
"$work/venv/bin/python" - <<'PY'
import pods
assert "site-packages" in pods.__file__, pods.__file__
from pods.paper import load_manifest
from pods.selection import select
from pods.study import load_schema
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
echo "wheel check: pods --help, pods analyze (tables as committed), from pods.selection import select: ok"
