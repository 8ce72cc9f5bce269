"""Phase timers and the training clock.

The x-axis of every curve is `train_time_s`: wall clock with evaluation and checkpointing taken
out, which is how the paper states its speedups (evaluation was done offline there).
"""
from __future__ import annotations

import time
from collections import defaultdict
from contextlib import contextmanager

from pods.vocabulary import STEP_PHASES


class TrainClock:
    """Seconds of training: running except inside `paused()`; resumable from a saved value.

    `wall` counts everything since the run first started (pauses included), also across resume.
    """

    def __init__(self, train_s: float = 0.0, wall_s: float = 0.0):
        self._train_base, self._wall_base = train_s, wall_s
        self._start = time.perf_counter()
        self._paused_s = 0.0

    @property
    def train(self) -> float:
        return self._train_base + (time.perf_counter() - self._start) - self._paused_s

    @property
    def wall(self) -> float:
        return self._wall_base + (time.perf_counter() - self._start)

    @contextmanager
    def paused(self):
        start = time.perf_counter()
        try:
            yield
        finally:
            self._paused_s += time.perf_counter() - start


class Heartbeat:
    """`due()` is true once every `every_s` seconds of wall clock (never when None): the progress
    line of a log file or a batch job, where a progress bar would be one endless line."""

    def __init__(self, every_s: float | None):
        self.every_s = every_s
        self._next = time.monotonic() + (every_s or 0.0)

    def due(self) -> bool:
        if self.every_s is None or time.monotonic() < self._next:
            return False
        self._next = time.monotonic() + self.every_s
        return True


class PhaseTimer:
    """Accumulates seconds per named phase; `lap()` returns and resets the current step's."""

    def __init__(self):
        self._current: dict[str, float] = defaultdict(float)

    @contextmanager
    def __call__(self, phase: str):
        start = time.perf_counter()
        try:
            yield
        finally:
            self._current[phase] += time.perf_counter() - start

    def take(self, phase: str) -> float:
        """Seconds accumulated in `phase` since the last take/lap, and reset it."""
        return self._current.pop(phase, 0.0)

    def lap(self, phases=STEP_PHASES) -> dict[str, float]:
        """`{phase}_s` for each of `phases` (0 if it did not run), then start a new step."""
        out = {f"{p}_s": self._current.get(p, 0.0) for p in phases}
        self._current = defaultdict(float)
        return out
