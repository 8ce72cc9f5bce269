"""PODS reproduction suite: GRPO and GRPO-PODS (down-sampled rollouts) with honest wall-clock timing."""

__version__ = "0.1.0"
