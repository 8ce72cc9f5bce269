"""The words every side speaks: where a run lives, what a method name says, what the arms of a design
hold equal, the phases of a step (docs/contracts.md).

The trainer, the study, the authors' data, the run files and the workflow all spell these from here.
The module imports nothing of the package (and nothing outside the standard library), so that any
side can depend on it without depending on another side.
"""
from __future__ import annotations

import enum
import re
from fractions import Fraction
from pathlib import PurePath
from typing import Any, NamedTuple

# --- where a run lives ---------------------------------------------------------------------------
# the components of a run's identity, in the order of its path
RUN_KEY = ("benchmark", "hardware", "method", "seed")
# where a run lives under a study's runs folder; `parse_run_path` reads the components back
RUN_LAYOUT = "{benchmark}/{hardware}/{method}/seed{seed}"
# every run directory under a runs folder, as a glob pattern
RUN_GLOB = RUN_LAYOUT.format(**{component: "*" for component in RUN_KEY})


def run_path(runs_dir: str, **key: Any) -> str:
    """`{runs_dir}/{benchmark}/{hardware}/{method}/seed{seed}` (as text: Snakemake patterns use it too)."""
    return f"{runs_dir}/{RUN_LAYOUT.format(**key)}"


def parse_run_path(run_dir: str | PurePath) -> dict[str, Any]:
    """Inverse of `run_path`: benchmark, hardware, method (checked) and seed, read off the path's last
    four components; ValueError when they are not a run's."""
    path = PurePath(run_dir)
    if not path.name.startswith("seed") or not path.name[4:].isdigit():
        raise ValueError(f"run directory {path} does not end in seed<k>")
    benchmark, hardware, method = path.parent.parent.parent.name, path.parent.parent.name, path.parent.name
    try:
        parse_method(method)
    except ValueError as exc:
        raise ValueError(f"run directory {path}: {exc}") from None
    return {"benchmark": benchmark, "hardware": hardware, "method": method, "seed": int(path.name[4:])}


# --- the phases of a step ------------------------------------------------------------------------
# a step record has one `<phase>_s` per phase, in this order (pods.runs.StepRecord)
STEP_PHASES = ("generate", "reward", "select", "logprob", "update")


# --- method names --------------------------------------------------------------------------------
class Method(NamedTuple):
    """What a run's `method` path component encodes."""

    rule: str  # "identity" for vanilla GRPO (m == n)
    n: int
    m: int
    dynamic: bool = False  # DAPO's dynamic sampling (TrainConfig.dynamic_sampling)
    variant: str = ""  # "" (GRPO, PODS, DAPO as the fields above say) or one of VARIANTS

    @property
    def is_grpo(self) -> bool:
        """Vanilla GRPO: every rollout of every group trained, no group dropped."""
        return self.rule == "identity" and not self.dynamic and not self.variant

    @property
    def name(self) -> str:
        return method_name(self.rule, self.n, self.m, self.dynamic, self.variant)

    @property
    def label(self) -> str:
        """Plot-legend text, in the same vocabulary."""
        if self.variant == "cppo":
            return f"CPPO (n={self.n}, k={self.m})"
        if self.variant == "greso":
            return (f"GRESO (n={self.n}, m={self.m})" if self.rule == "identity"
                    else f"GRESO + PODS {self.rule} (n={self.n}, m={self.m})")
        if self.rule == "identity":
            return f"{'DAPO' if self.dynamic else 'GRPO'} (n={self.n}, m={self.m})"
        return f"{'DAPO + ' if self.dynamic else ''}PODS {self.rule} (n={self.n}, m={self.m})"

    @property
    def prompt_share(self) -> Fraction:
        """Prompts a step draws per prompt of `prompts_per_step`: n / m for CPPO (its dynamic completion
        allocation), 1 for every other method."""
        return Fraction(self.n, self.m) if self.variant == "cppo" else Fraction(1)

    @property
    def update_width(self) -> int:
        """Rollouts the update trains per prompt of `prompts_per_step`: m, and for CPPO n (k = m kept of
        each of n / m times as many prompts), what an equal_update comparison holds equal."""
        return self.n if self.variant == "cppo" else self.m


# Methods beyond GRPO, PODS and DAPO, each a prefix of its own (docs/field.md):
#   cppo-n{n}-m{k}: CPPO (arXiv 2503.22342): of each prompt's n completions the k with the largest
#     |advantage| are trained (rule max_abs_advantage, advantages over all n), and the step draws
#     n / k times as many prompts, so the update keeps the size of prompts_per_step groups of n
#     (TrainConfig.completion_allocation)
#   greso-n{n}-m{n}, greso-{rule}-n{n}-m{m}: GRESO (arXiv 2506.02177): DAPO's dynamic sampling with its
#     pre-rollout filter, which skips prompts whose recent groups were all correct or all wrong
#     (TrainConfig.pre_rollout_filter); with a rule, PODS's selection after it
VARIANTS = ("cppo", "greso")
CPPO_RULE = "max_abs_advantage"  # CPPO's pruning: keep the completions with the largest |advantage|

# grpo-n16-m16 | pods-<rule>-n64-m16 | dapo-n16-m16 | dapo-<rule>-n64-m16 | cppo-n16-m4 | greso-n16-m16 |
# greso-<rule>-n64-m16
METHOD_RE = re.compile(r"^(?P<kind>grpo|pods|dapo|cppo|greso)(?:-(?P<rule>[a-z_]+))?-n(?P<n>\d+)-m(?P<m>\d+)$")
# the same, unanchored and without group names: the Snakemake wildcard constraint of `method`
METHOD_PATTERN = re.sub(r"\(\?P<\w+>", "(", METHOD_RE.pattern)[1:-1]


def method_name(rule: str, n: int, m: int, dynamic: bool = False, variant: str = "") -> str:
    """`grpo-n16-m16` for vanilla GRPO, `pods-max_variance-n64-m16` for a down-sampled run; with
    DAPO's dynamic sampling `dapo-n16-m16` and `dapo-max_variance-n64-m16`; CPPO `cppo-n16-m4`
    (rule max_abs_advantage, m < n); GRESO (dynamic sampling and its filter) `greso-n16-m16` and
    `greso-max_variance-n64-m16`."""
    if m > n or m < 1:
        raise ValueError(f"method needs 1 <= m <= n, got n={n}, m={m}")
    if variant and variant not in VARIANTS:
        raise ValueError(f"unknown method variant {variant!r}; known: {', '.join(VARIANTS)}")
    if variant == "cppo":
        if rule != CPPO_RULE or dynamic or m == n:
            raise ValueError(f"cppo keeps k < n completions per prompt by {CPPO_RULE!r}, without dynamic sampling "
                             f"(got rule {rule!r}, n={n}, m={m}, dynamic={dynamic})")
        return f"cppo-n{n}-m{m}"
    if variant == "greso" and not dynamic:
        raise ValueError("greso is DAPO's dynamic sampling with GRESO's pre-rollout filter: it needs dynamic=True")
    kind = variant or ("dapo" if dynamic else None)
    if rule == "identity":
        if m != n:
            raise ValueError(f"rule 'identity' keeps every rollout, so it needs m == n (got n={n}, m={m})")
        return f"{kind or 'grpo'}-n{n}-m{m}"
    if m == n:
        raise ValueError(f"rule {rule!r} with m == n (= {n}) selects nothing away: use rule 'identity'")
    return f"{kind or 'pods'}-{rule}-n{n}-m{m}"


def kept_rule(n: int, m: int, rule: str) -> str:
    """The rule a run that keeps m of n with `rule` runs: every rule keeps all n when m == n, and
    that is `identity` (vanilla GRPO) whatever rule is named."""
    return "identity" if m == n else rule


def method_for(n: int, m: int, rule: str, dynamic: bool = False, variant: str = "") -> Method:
    """The method that keeps m of n with `rule` (`kept_rule`: `identity` when m == n). ValueError
    unless 1 <= m <= n, and for `identity` with m < n."""
    method = Method(kept_rule(n, m, rule), n, m, dynamic, variant)
    method_name(*method)  # checks n, m against the rule
    return method


def parse_method(name: str) -> Method:
    """Inverse of `method_name`."""
    match = METHOD_RE.match(name)
    kind, rule = (match["kind"], match["rule"]) if match else (None, None)
    if match is None or (kind in ("grpo", "cppo") and rule) or (kind == "pods" and not rule):
        raise ValueError(
            f"method {name!r} is not of the form 'grpo-n<N>-m<N>', 'pods-<rule>-n<N>-m<M>', 'dapo-n<N>-m<N>', "
            "'dapo-<rule>-n<N>-m<M>', 'cppo-n<N>-m<K>', 'greso-n<N>-m<N>' or 'greso-<rule>-n<N>-m<M>'"
        )
    n, m = int(match["n"]), int(match["m"])
    variant = kind if kind in VARIANTS else ""
    rule = CPPO_RULE if kind == "cppo" else rule or "identity"
    dynamic = kind in ("dapo", "greso")
    method_name(rule, n, m, dynamic, variant)  # validates n, m against the rule
    return Method(rule, n, m, dynamic, variant)


# --- designs -------------------------------------------------------------------------------------
class Arm(NamedTuple):
    """One arm of a comparison as its trainer resolves it."""

    method: Method
    rollouts_per_prompt: int  # generated per prompt: n times the groups per prompt


class Design(str, enum.Enum):
    """The paper's two designs (docs/paper.md 2.1.6 and 2.2): what both arms of a comparison hold equal.

    `equal_update`: the baseline (GRPO, m == n) and the method (PODS, n > m) train the same m.
    `equal_generation`: the baseline (GRPO-GA, m == n, more micro-batches) and the method (PODS,
    m < n) generate as many rollouts per prompt.
    """

    EQUAL_UPDATE = "equal_update"
    EQUAL_GENERATION = "equal_generation"

    def held_equal(self, arm: Arm) -> Fraction:
        """The quantity this design holds equal across the arms, of one arm, per prompt of
        `prompts_per_step`: the rollouts the update trains (m; CPPO's n, `Method.update_width`), or the
        rollouts generated (CPPO's over n / m times as many prompts, `Method.prompt_share`)."""
        if self is Design.EQUAL_UPDATE:
            return Fraction(arm.method.update_width)
        return arm.rollouts_per_prompt * arm.method.prompt_share

    def violation(self, baseline: Arm, method: Arm) -> str | None:
        """Why the two arms break this design, or None."""
        if self.held_equal(baseline) == self.held_equal(method):
            return None

        def say(arm: Arm) -> str:
            held = self.held_equal(arm)
            return f"{held}" + (" per prompt of prompts_per_step (CPPO)" if arm.method.variant == "cppo" else "")

        if self is Design.EQUAL_UPDATE:
            return (f"equal_update trains the same m in both arms, but the baseline {baseline.method.name} trains "
                    f"m={say(baseline)} and {method.method.name} trains m={say(method)}")
        return (f"equal_generation generates as many rollouts per prompt in both arms, but the baseline "
                f"{baseline.method.name} generates {say(baseline)} and {method.method.name} "
                f"generates {say(method)}")


DESIGNS = tuple(design.value for design in Design)
