"""PODS inside other RL frameworks.

Each module here imports its framework, which stays an optional extra: `pods.integrations.trl`
needs `pip install -e ".[trl]"` (in the same pip command as your `torch==...` pin on a CPU machine),
`pods.integrations.verl` the `verl` extra in an environment of its own (`bash scripts/verl_env.sh`:
verl pins a transformers below the study's; docs/verl.md).
"""
