"""Configuration and the names shared by the CLI, the workflow, the run directories and the plots."""
from __future__ import annotations

import re
from typing import NamedTuple


class Method(NamedTuple):
    """What a run's `method` path component encodes."""

    rule: str  # "identity" for vanilla GRPO (m == n)
    n: int
    m: int

    @property
    def is_grpo(self) -> bool:
        return self.rule == "identity"

    @property
    def name(self) -> str:
        return method_name(self.rule, self.n, self.m)

    @property
    def label(self) -> str:
        """Plot-legend text, in the same vocabulary."""
        if self.is_grpo:
            return f"GRPO (n={self.n}, m={self.m})"
        return f"PODS {self.rule} (n={self.n}, m={self.m})"


_METHOD_RE = re.compile(r"^(?:grpo|pods-(?P<rule>[a-z_]+))-n(?P<n>\d+)-m(?P<m>\d+)$")


def method_name(rule: str, n: int, m: int) -> str:
    """`grpo-n16-m16` for vanilla GRPO, `pods-max_variance-n64-m16` for a down-sampled run."""
    if m > n or m < 1:
        raise ValueError(f"method needs 1 <= m <= n, got n={n}, m={m}")
    if rule == "identity":
        if m != n:
            raise ValueError(f"rule 'identity' keeps every rollout, so it needs m == n (got n={n}, m={m})")
        return f"grpo-n{n}-m{m}"
    if m == n:
        raise ValueError(f"rule {rule!r} with m == n (= {n}) selects nothing away: use rule 'identity'")
    return f"pods-{rule}-n{n}-m{m}"


def parse_method(name: str) -> Method:
    """Inverse of `method_name`."""
    match = _METHOD_RE.match(name)
    if match is None:
        raise ValueError(
            f"method {name!r} is not of the form 'grpo-n<N>-m<N>' or 'pods-<rule>-n<N>-m<M>'"
        )
    n, m = int(match["n"]), int(match["m"])
    rule = match["rule"] or "identity"
    method_name(rule, n, m)  # validates n, m against the rule
    return Method(rule, n, m)
