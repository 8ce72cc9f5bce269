#!/usr/bin/env bash
# Builds the environment in which PODS's verl plugin (pods.integrations.verl) is tested on a CPU:
# the pinned verl with a CPU torch and this package installed editable without its dependencies,
# kept apart from the main environment because verl pins transformers below what the embedded
# study needs (verl 0.9.1: transformers>=5.5.3,<5.11, ours >=5.19). The plugin imports the
# package's core only (pods.selection: torch and numpy), which verl's requirements already bring.
#
#   bash scripts/verl_env.sh                   # creates (or reuses) .venvs/verl
#   VERL_ENV=/path/to/venv bash scripts/verl_env.sh
#   .venvs/verl/bin/python -m pytest tests/core/test_verl.py      # the plugin's tests, real verl
#
# verl is installed without an extra of its own: its `fsdp`, `vllm`, `sglang` and `cpu` extras pin
# torch 2.11 and GPU kernels (flash-attn, cupy). Its base requirements (ray, tensordict, hydra,
# transformers, datasets, ...) install on a CPU; `verl.trainer.ppo.ray_trainer` also imports
# cachetools, fastapi, uvicorn, pyzmq and msgspec (verl's `verl-core` extra), which this package's
# `verl` extra adds. On a GPU node install verl's GPU stack beside it (`pip install "verl[vllm]==0.9.1"`).
set -euo pipefail
cd "$(dirname "$0")/.."

ENV_DIR=${VERL_ENV:-.venvs/verl}
PYTHON=${PYTHON:-python3.11}    # verl 0.9.1: CPython 3.10 to 3.12
VERL_VERSION=0.9.1              # the `verl` extra of pyproject.toml pins the same
# The CPU build of the torch the rest of the project pins. PyPI itself has no `+cpu` builds: where
# no local wheel folder holds it, point pip at PyTorch's CPU wheel index (PIP_EXTRA_INDEX_URL).
TORCH_VERSION=${VERL_TORCH:-2.13.0+cpu}

# Reused when it imports verl's trainer at the pinned version and this checkout's pods (-I: not from
# the working directory, so an environment made for another checkout is rebuilt).
if [ -x "$ENV_DIR/bin/python" ] && "$ENV_DIR/bin/python" -I - "$VERL_VERSION" "$PWD" <<'PY' 2>/dev/null; then
import os
import sys
from importlib.metadata import version

import pods.selection  # noqa: F401
import pytest  # noqa: F401
import verl.trainer.ppo.ray_trainer  # noqa: F401  (the import itself is what breaks when the environment is wrong)

here = os.path.realpath(pods.__file__).startswith(os.path.realpath(sys.argv[2]) + os.sep)
sys.exit(version("verl") != sys.argv[1] or not here)
PY
    echo "verl_env: $ENV_DIR is ready (verl $VERL_VERSION)"
    exit 0
fi

start=$SECONDS
echo "verl_env: building $ENV_DIR (verl $VERL_VERSION, torch $TORCH_VERSION)"
rm -rf "$ENV_DIR"
"$PYTHON" -m venv "$ENV_DIR"
pip=("$ENV_DIR/bin/python" -m pip --quiet)
# One resolver run for the `verl` extra (the pinned verl and the few modules its trainer imports that
# its base requirements omit) with the CPU torch, so verl's pins (transformers, tensordict, numpy)
# win. The package itself comes editable, with its core requirements only (torch, numpy): the
# study's transformers>=5.19 would fight verl's pin. pytest: the tests.
"${pip[@]}" install "torch==$TORCH_VERSION" -e ".[verl]" pytest
"$ENV_DIR/bin/python" -I -c "import verl, torch, transformers, pods.integrations.verl; print('verl_env: verl', verl.__version__, '| torch', torch.__version__, '| transformers', transformers.__version__)"
echo "verl_env: built in $((SECONDS - start)) s"
