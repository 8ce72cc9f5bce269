"""PODS for TRL: a `GRPOTrainer` that generates n completions per prompt and trains on m of them.

    from pods.integrations.trl import PODSGRPOConfig, PODSGRPOTrainer

    args = PODSGRPOConfig(..., num_generations=64, num_kept_generations=16, selection_rule="max_variance")
    trainer = PODSGRPOTrainer(model=..., reward_funcs=..., args=args, train_dataset=...)

With `completion_allocation=True` (CPPO's dynamic completion allocation, and with
`selection_rule="max_abs_advantage"`, `normalize_advantages_over="all"` CPPO itself),
`per_device_train_batch_size` counts the completions each micro-step trains on instead, and n / m
times as many are generated (`PODSGRPOConfig`).

Everything else is TRL's `GRPOTrainer`, and every TRL field keeps its meaning: `num_generations`
completions are sampled per prompt, and `per_device_train_batch_size`, `generation_batch_size`
and `steps_per_generation` count generated completions. Each optimiser micro-step then trains on
`per_device_train_batch_size * m / n` of them.

Where the pipeline is cut
-------------------------
TRL builds a generation batch in one method, `_generate_and_score_completions`: generate, pad,
count the loss tokens (`num_items_in_batch`), run the no-grad log-prob passes (the old policy's
under vLLM's importance-sampling correction or when `gradient_accumulation_steps` is not a
multiple of `steps_per_generation * num_iterations`, the reference model's when `beta != 0`), and
only then call the reward functions and compute advantages. The log-prob passes come before the
rewards, so completions cannot be dropped inside that method without rewriting it. This trainer
splits its work in two instead:

1. on all n completions per prompt, only TRL's own `_generate` and `_calculate_rewards`, then
   `pods.selection.select` on the weighted sum of the rewards of each prompt's n completions;
2. TRL's whole `_generate_and_score_completions` on the kept rows only, with `_generate` and
   `_calculate_rewards` handing back the completions and rewards of step 1 instead of generating
   and scoring again, and with `self.num_generations` set to m while it runs. So TRL's own code
   pads, counts `num_items_in_batch`, runs the old and reference log-prob passes and normalises
   advantages over the kept completions, with every `scale_rewards` and
   `multi_objective_aggregation` option it has.

Training (`_prepare_inputs`, the buffer of generation batches, `_compute_loss` and every
`loss_type` normaliser) is TRL's, untouched: it sees only kept completions.

What still runs on all n: generation (vLLM or transformers) and its completion-length metrics,
decoding, and the reward functions, which is the work PODS needs to choose. No policy or reference
forward pass runs on a dropped completion: beyond one sort per prompt, down-sampling adds no
compute. Evaluation (`num_generations_eval`) runs TRL's path unchanged, without selection.

Not supported (a clear error at construction): `tools`, `environment_factory`, `rollout_func`, and
image columns in the dataset (their state lives inside TRL's method, before generation).

TRL's internals move between releases; `TESTED_TRL` is the range this was tested on (the `trl`
extra pins it) and tests/core/test_trl.py fails on any change of the private methods relied on here.
"""
from __future__ import annotations

import inspect
import logging
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
import trl
from packaging.specifiers import SpecifierSet
from trl import GRPOConfig, GRPOTrainer

from pods.grpo import kept_advantages
from pods.selection import SELECTION_RULES, select

logger = logging.getLogger(__name__)

TESTED_TRL = SpecifierSet(">=1.9,!=1.15.0,<1.17")  # keep in step with the `trl` extra in pyproject.toml
if trl.__version__ not in TESTED_TRL:
    warnings.warn(
        f"pods.integrations.trl was tested with trl{TESTED_TRL}, found {trl.__version__}; it relies on private "
        "GRPOTrainer methods, run tests/core/test_trl.py before trusting it",
        stacklevel=2,
    )


@dataclass
class PODSGRPOConfig(GRPOConfig):
    r"""
    Configuration for [`PODSGRPOTrainer`]: TRL's [`GRPOConfig`] plus the down-sampling knobs of PODS
    ("Not All Rollouts are Useful: Down-Sampling Rollouts in LLM RL", arXiv 2504.13818).

    All [`GRPOConfig`] parameters keep their meaning: `num_generations` completions are generated per prompt (n in
    the paper) and the batch sizes count generated completions. Each micro-step trains on
    `per_device_train_batch_size * num_kept_generations / num_generations` completions.

    Parameters:
        > Parameters that control down-sampling

        num_kept_generations (`int`, *optional*):
            Completions per prompt kept for the update (m in the paper), chosen from the `num_generations` generated
            ones by `selection_rule` from their rewards. Advantages, log-probabilities, the loss and its normalisers
            (`num_items_in_batch` included) are computed over the kept completions only. Must satisfy
            `2 <= num_kept_generations <= num_generations`. If `None`, every completion is kept and the trainer is
            plain [`GRPOTrainer`].
        selection_rule (`str`, *optional*, defaults to `"max_variance"`):
            Down-sampling rule, a name in `pods.selection.SELECTION_RULES`:

            - `"max_variance"` (the paper's): the subset whose rewards have the largest variance, always some
              highest plus some lowest rewards.
            - `"max_abs_advantage"`: the rewards farthest from the group's mean (the largest |advantage|).
            - `"max_reward"`: the highest rewards.
            - `"random"`: uniformly at random, seeded by `seed`.
            - `"identity"`: all of them; needs `num_kept_generations == num_generations`.

            Rules rank the weighted sum of the reward functions (`reward_weights`), whatever
            `multi_objective_aggregation` says; a completion for which every reward function returned `None` ranks
            at its group's mean reward.
        normalize_advantages_over (`str`, *optional*, defaults to `"kept"`):
            Which rewards give each group's mean and standard deviation in the advantages:

            - `"kept"` (the paper's code): the `num_kept_generations` kept rewards, computed by TRL as for any group,
              so every `scale_rewards` and `multi_objective_aggregation` option applies.
            - `"all"`: all `num_generations` generated rewards. Needs `scale_rewards` `"group"` or `"none"` and
              `multi_objective_aggregation="sum_then_normalize"`.

        > Parameters that control CPPO's dynamic completion allocation

        completion_allocation (`bool`, *optional*, defaults to `False`):
            CPPO's dynamic completion allocation ("CPPO: Accelerating the Training of Group Relative Policy
            Optimization-Based Reasoning Models", arXiv 2503.22342): the update keeps its size and the slots that
            keeping `num_kept_generations` of `num_generations` frees are filled with the completions of more prompts.
            `per_device_train_batch_size` then counts the completions each micro-step trains on (as in CPPO's own
            code), and the trainer generates `num_generations / num_kept_generations` times as many, for that many
            times as many prompts: `per_device_train_batch_size` becomes `per_device_update_batch_size *
            num_generations / num_kept_generations`, which must be whole. Needs `num_kept_generations <
            num_generations`. CPPO itself is `selection_rule="max_abs_advantage"` (its `metric='smallest'` prunes the
            smallest |advantage|), `normalize_advantages_over="all"` (its advantages are over the whole group) and
            `completion_allocation=True`; its pruning rate is `1 - num_kept_generations / num_generations`.
        per_device_update_batch_size (`int`, *optional*):
            Set by `completion_allocation` from `per_device_train_batch_size` as given: the completions each
            micro-step trains on. Given directly, it sets `per_device_train_batch_size` instead.
    """

    num_kept_generations: int | None = field(
        default=None,
        metadata={
            "help": "Completions per prompt kept for the update (m), chosen from the `num_generations` generated ones "
            "by `selection_rule`. If `None`, all are kept (plain GRPO)."
        },
    )
    selection_rule: str = field(
        default="max_variance",
        metadata={
            "help": "Down-sampling rule from `pods.selection.SELECTION_RULES`: 'max_variance' (the paper's), "
            "'max_abs_advantage', 'max_reward', 'random', or 'identity' (keeps all)."
        },
    )
    normalize_advantages_over: str = field(
        default="kept",
        metadata={
            "help": "Rewards that give each group's mean and std in the advantages: 'kept' (the paper's) or 'all' "
            "(every generated completion)."
        },
    )

    completion_allocation: bool = field(
        default=False,
        metadata={
            "help": "CPPO's dynamic completion allocation: per_device_train_batch_size counts the completions each "
            "micro-step trains on, and n / m times as many are generated, for n / m times as many prompts."
        },
    )
    per_device_update_batch_size: int | None = field(
        default=None,
        metadata={"help": "With completion_allocation: the completions each micro-step trains on (set from "
                          "per_device_train_batch_size when None)."},
    )

    def __post_init__(self):
        if self.completion_allocation:  # before TRL derives the generation batch from the micro-step's size
            self._allocate_completions()
        elif self.per_device_update_batch_size is not None:
            raise ValueError("per_device_update_batch_size is completion_allocation's: set completion_allocation=True")
        super().__post_init__()  # resolves generation_batch_size and steps_per_generation first
        n, m = self.num_generations, self.num_kept_generations
        if self.selection_rule not in SELECTION_RULES:
            raise ValueError(
                f"unknown selection_rule {self.selection_rule!r}; known rules: {', '.join(sorted(SELECTION_RULES))}"
            )
        if self.normalize_advantages_over not in ("kept", "all"):
            raise ValueError(
                f"normalize_advantages_over must be 'kept' or 'all', got {self.normalize_advantages_over!r}"
            )
        if m is None:
            return
        if not 2 <= m <= n:
            raise ValueError(
                f"num_kept_generations must satisfy 2 <= num_kept_generations <= num_generations (GRPO needs two "
                f"completions per group for an advantage), got num_kept_generations={m}, num_generations={n}"
            )
        if self.selection_rule == "identity" and m != n:
            raise ValueError(f"selection_rule 'identity' keeps every completion, so it needs num_kept_generations == "
                             f"num_generations (got {m} and {n})")
        # Selection is per prompt on each process's own rows, so a process must hold whole prompt groups.
        local_rows = self.per_device_train_batch_size * self.steps_per_generation
        if local_rows % n:
            raise ValueError(
                f"per_device_train_batch_size * steps_per_generation ({self.per_device_train_batch_size} * "
                f"{self.steps_per_generation} = {local_rows}) must be a multiple of num_generations ({n}) so that each "
                "process generates whole prompt groups to select from"
            )
        # TRL splits the kept generation batch into steps_per_generation equal micro-steps.
        if (self.per_device_train_batch_size * m) % n:
            raise ValueError(
                f"per_device_train_batch_size * num_kept_generations / num_generations "
                f"({self.per_device_train_batch_size}"
                f" * {m} / {n}) must be a whole number: it is the completions each micro-step trains on"
            )
        if self.normalize_advantages_over == "all":
            if self.scale_rewards not in ("group", "none"):
                raise ValueError(f"normalize_advantages_over='all' needs scale_rewards 'group' or 'none', got "
                                 f"{self.scale_rewards!r}")
            if self.multi_objective_aggregation != "sum_then_normalize":
                raise ValueError("normalize_advantages_over='all' needs multi_objective_aggregation="
                                 f"'sum_then_normalize', got {self.multi_objective_aggregation!r}")


    def _allocate_completions(self) -> None:
        """CPPO: the micro-step keeps `per_device_update_batch_size` completions of n / m times as many
        generated. Idempotent: a config rebuilt from this one's fields (which hold both sizes) is the same."""
        n, m = self.num_generations, self.num_kept_generations
        if m is None or m >= n:
            raise ValueError(f"completion_allocation needs num_kept_generations < num_generations (CPPO fills the "
                             f"slots that pruning frees), got num_kept_generations={m}, num_generations={n}")
        if self.per_device_update_batch_size is None:
            self.per_device_update_batch_size = self.per_device_train_batch_size
        kept = self.per_device_update_batch_size
        if kept * n % m:
            raise ValueError(f"completion_allocation: per_device_train_batch_size * num_generations / "
                             f"num_kept_generations ({kept} * {n} / {m}) must be a whole number: the completions "
                             "each micro-step generates for its update")
        self.per_device_train_batch_size = kept * n // m


class PODSGRPOTrainer(GRPOTrainer):
    """TRL's `GRPOTrainer` that trains on `num_kept_generations` of each prompt's `num_generations` completions.

    Takes the same arguments as `GRPOTrainer`, with `args` a [`PODSGRPOConfig`]. See this module's docstring for where
    the selection sits in TRL's pipeline and what still runs on every generated completion.
    """

    _tag_names = ["trl", "grpo", "pods"]

    def __init__(self, *args, **kwargs):
        bound = inspect.signature(GRPOTrainer.__init__).bind(self, *args, **kwargs).arguments
        config = bound.get("args")
        if not isinstance(config, PODSGRPOConfig):
            raise TypeError(f"PODSGRPOTrainer needs args=PODSGRPOConfig(...), got {type(config).__name__}")
        for name in ("tools", "environment_factory", "rollout_func"):
            if bound.get(name) is not None and config.num_kept_generations is not None:
                raise ValueError(f"PODSGRPOTrainer does not support `{name}` with down-sampling: its per-completion "
                                 "state is set up inside GRPOTrainer before generation, where completions cannot be "
                                 "dropped")
        columns = getattr(bound.get("train_dataset"), "column_names", None) or []
        if config.num_kept_generations is not None and {"image", "images"} & set(columns):
            raise ValueError("PODSGRPOTrainer supports text prompts only; the training dataset has image columns")
        super().__init__(*args, **kwargs)
        self._num_kept = config.num_kept_generations
        # One generator, seeded alike on every process, so that all processes draw the same random subsets.
        self._selection_generator = torch.Generator().manual_seed(config.seed)
        self._replayed_generation = None
        self._replayed_rewards = None
        if self._num_kept is not None:
            trained = config.per_device_train_batch_size * self._num_kept // self.num_generations
            logger.info(
                "PODS: %d prompts per generation batch, %d completions generated per prompt, %d kept (%s); "
                "%d completions per device per micro-step",
                config.generation_batch_size // self.num_generations, self.num_generations, self._num_kept,
                config.selection_rule, trained,
            )

    # --- the cut: generate and score all n, select, then TRL's own pipeline on the kept rows ---

    def _generate_and_score_completions(self, inputs):
        if self._num_kept is None or not self.model.training:
            return super()._generate_and_score_completions(inputs)
        if any(key in inputs[0] for key in ("image", "images")):
            raise ValueError("PODSGRPOTrainer supports text prompts only; this batch has images")

        prompts = [x["prompt"] for x in inputs]
        generated = self._generate(prompts)
        prompt_ids, completion_ids, tool_mask, completions, logprobs, extra, images, tool_images = generated
        if tool_mask is not None or extra or images is not None:
            raise RuntimeError(_DRIFT + "_generate returned tool, rollout or image fields for a text-only batch")
        rewards_per_func = self._calculate_rewards(inputs, prompts, completions, completion_ids)
        rewards, unscorable = self._total_rewards(rewards_per_func)
        kept = self._select(rewards)

        # Kept rows in generation order, group after group: indices into all processes' rows, then into ours.
        n, m = self.num_generations, self._num_kept
        global_rows = (torch.arange(len(kept))[:, None] * n + kept).flatten()
        start = self.accelerator.process_index * len(inputs)
        local = (global_rows[(global_rows >= start) & (global_rows < start + len(inputs))] - start).tolist()

        def take(values):
            return None if values is None else [values[i] for i in local]

        self._replayed_generation = (take(prompt_ids), take(completion_ids), None, take(completions), take(logprobs),
                                     {}, None, tool_images)
        self._replayed_rewards = rewards_per_func[global_rows.to(rewards_per_func.device)]
        # Columns that reward functions logged through `log_extra` are flushed by TRL with the kept rows.
        for column, values in self._pending_extra_logs.items():
            if len(values) == len(inputs):
                self._pending_extra_logs[column] = take(values)
        scored = rewards[~unscorable]
        self._metrics["train"]["pods/generated_reward_mean"].append(scored.mean().item())
        self._metrics["train"]["pods/generated_reward_std"].append(scored.std().item())

        try:
            with self._groups_of(m):
                output = super()._generate_and_score_completions(take(inputs))
            if self._replayed_generation is not None or self._replayed_rewards is not None:
                raise RuntimeError(_DRIFT + "_generate_and_score_completions no longer calls _generate and "
                                   "_calculate_rewards")
        finally:
            self._replayed_generation = self._replayed_rewards = None

        if self.args.normalize_advantages_over == "all":
            advantages = kept_advantages(rewards, kept, normalize_over="all", scale=self.scale_rewards == "group")
            advantages[torch.gather(unscorable, 1, kept)] = 0.0  # TRL's rule: no signal from unscorable rows
            ours = slice(start // n * m, (start + len(inputs)) // n * m)
            output["advantages"] = advantages.flatten()[ours].to(output["advantages"])
            # The completions table ends with TRL's kept-normalised advantages of all processes: log these instead.
            for _ in range(advantages.numel()):
                self._logs["advantages"].pop()
            self._logs["advantages"].extend(advantages.flatten().tolist())
        return output

    def _generate(self, prompts):
        if self._replayed_generation is None:
            return super()._generate(prompts)
        replay, self._replayed_generation = self._replayed_generation, None
        if len(replay[1]) != len(prompts):
            raise RuntimeError(_DRIFT + f"_generate got {len(prompts)} prompts, {len(replay[1])} kept completions")
        return replay

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        if self._replayed_rewards is None:
            return super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        replay, self._replayed_rewards = self._replayed_rewards, None
        if len(replay) != len(prompts) * self.accelerator.num_processes:
            raise RuntimeError(_DRIFT + f"_calculate_rewards got {len(prompts)} rows per process, {len(replay)} "
                               "kept rewards over all processes")
        return replay

    # --- helpers ---

    def _total_rewards(self, rewards_per_func: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Rewards `[groups, n]` (float64, CPU) that selection ranks, and which completions are unscorable.

        The weighted sum of the reward functions, as TRL sums them. A completion every function returned `None`
        for gets its group's mean over the scorable ones (0 if there are none): mid-ranked, the last place
        max-variance looks; TRL later gives it advantage 0 if it is kept.
        """
        per_func = rewards_per_func.detach().to("cpu", torch.float64)
        unscorable = torch.isnan(per_func).all(dim=1)
        total = (per_func * self.reward_weights.to(per_func)).nansum(dim=1)
        total[unscorable] = torch.nan
        grouped = total.view(-1, self.num_generations)
        fill = torch.nan_to_num(torch.nanmean(grouped, dim=1, keepdim=True), nan=0.0)
        return torch.where(torch.isnan(grouped), fill, grouped), unscorable.view_as(grouped)

    def _select(self, rewards: torch.Tensor) -> torch.Tensor:
        """Indices `[groups, m]` of the kept completions of each group, ascending."""
        return select(rewards, self._num_kept, self.args.selection_rule, generator=self._selection_generator)

    @contextmanager
    def _groups_of(self, size: int):
        """TRL reads the group size for its advantages from `self.num_generations`."""
        generated, self.num_generations = self.num_generations, size
        try:
            yield
        finally:
            self.num_generations = generated


_DRIFT = (
    f"TRL's GRPOTrainer internals differ from those PODSGRPOTrainer was written for (trl{TESTED_TRL}, found "
    f"{trl.__version__}): "
)
