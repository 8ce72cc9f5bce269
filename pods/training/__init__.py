"""The training side: a config becomes a run directory (docs/architecture.md, "Training").

Nothing here imports `pods.study` or `pods.paper`; the run files (`pods.runs`) are what the other
sides read.
"""
