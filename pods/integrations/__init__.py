"""PODS inside other RL frameworks.

Each module here imports its framework, which stays an optional extra: `pods.integrations.trl`
needs `pip install -e ".[trl]"` (in the same pip command as your `torch==...` pin on a CPU machine).
"""
