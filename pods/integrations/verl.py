"""PODS for verl: keep m of the n rollouts of each prompt before verl's old-log-prob, reference and update passes.

    python -m pods.integrations.verl actor_rollout_ref.rollout.n=16 pods.m=4 pods.rule=max_variance ...

is verl's `python -m verl.trainer.main_ppo` with its legacy `RayPPOTrainer` (`trainer.use_v1=False`)
and two keys more: `pods.m` (rollouts kept per prompt) and `pods.rule` (a rule of `pods.selection`).
`actor_rollout_ref.rollout.n` keeps its meaning (rollouts generated per prompt), and so do
`data.train_batch_size` and `actor_rollout_ref.actor.ppo_mini_batch_size` (prompts): each update
mini-batch holds `ppo_mini_batch_size * m` rollouts instead of `* n`. The pieces:

- `downsample(data, m, rule)`: the pure function. It groups the rows of a `DataProto` by prompt id
  (`uid`), reads one score per rollout (`rm_scores`, verl's token-level reward tensor, summed over
  `response_mask`), calls `pods.selection.select` on the `[G, n]` score matrix and returns the kept
  rows (one `select_idxs`, so every tensor and non-tensor field stays aligned) with the metrics.
- `pods_settings(config)`: the `pods` keys checked against the rest of verl's config, before Ray or
  any worker starts; every refusal is one line starting `pods:`.
- `PODSRayPPOTrainer`: verl's `RayPPOTrainer` with the drop inside `_balance_batch`.
- `main()`: the command above (verl's config plus `pods_ppo_trainer.yaml` beside this module).

Where the pipeline is cut
-------------------------
`RayPPOTrainer.fit` (verl 0.9.1) generates, repeats the batch n times per prompt, then calls
`_balance_batch` (when `trainer.balance_batch`, verl's default), then reads the rewards
(`extract_reward`: `batch.batch["rm_scores"]`), then runs the old-log-prob pass (or the bypass
mode), the reference pass, the values, the advantages and the update. `fit` has no hook of its own
and is 400 lines long, so rather than override it this trainer overrides the first method it calls
after generation: `_balance_batch` drops the rows in place (the `batch` object `fit` holds) and then
runs verl's own balancing on the kept rows, so the balance is computed once, after the drop. By
then the rollouts are scored: verl's reward loop scores each rollout as it is generated and puts
`rm_scores` in the batch. Everything after it (`global_token_num`, the reward extras, old-log-prob,
reference, values, advantages, the update, the step's data metrics) sees the kept rows only.

`_update_actor` and `_update_critic` read `actor_rollout_ref.rollout.n` for one thing, the rows of
an update mini-batch (`ppo_mini_batch_size * n`); they run here with `n` read as `m`, so a
mini-batch still holds `ppo_mini_batch_size` prompts.

Divisibility: the kept count is trimmed by whole groups, never padded. Each batch's kept rows must
split evenly over the data-parallel ranks and into update mini-batches; `downsample(divisor=d)`
keeps a number of groups whose `m` rows each make a multiple of `d`, dropping the groups whose kept
scores vary the least (with 0/1 rewards a group of equal scores has zero advantage: it adds no
gradient). Padding would add rows that pay every pass PODS exists to save, and rows verl's GRPO
would fold into its group statistics unless masked everywhere. With verl's fixed-size batches
(`drop_last=True`) and the sizes `pods_settings` requires (`train_batch_size * m` and
`ppo_mini_batch_size * m` multiples of the GPU count), nothing is ever trimmed; the trim is the
guard for a batch that arrives otherwise, and `pods/groups_trimmed` reports it.

Refused (one line each, before any worker starts): the V1 trainer (`trainer.use_v1=True`, verl
0.9's default; it has no `RayPPOTrainer.fit`), `trainer.balance_batch=False` (the hook is the
balance), an advantage estimator other than GRPO, and the asynchronous reward: a reward model
colocated with the actor (`reward.reward_model.enable` without `enable_resource_pool`), which verl
scores after the balance, and the older `reward_model.launch_reward_fn_async`; neither has rewards
where the drop happens.

What runs only on a GPU: generation, the reward loop, the log-prob passes and the update (verl's
workers). tests/core/test_verl.py runs this module's functions, the hook on a real `DataProto`
through verl's own `_balance_batch`, `_update_actor` up to the worker call, and the example's
config through verl's and this module's validation, all on a CPU.
"""
from __future__ import annotations

import math
import warnings
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch
import verl
from omegaconf import OmegaConf
from verl import DataProto
from verl.trainer import main_ppo_v0
from verl.trainer.ppo.ray_trainer import RayPPOTrainer

from pods.selection import SELECTION_RULES, select

TESTED_VERL = "0.9.1"  # keep in step with the `verl` extra in pyproject.toml and scripts/verl_env.sh
if verl.__version__ != TESTED_VERL:
    warnings.warn(f"pods.integrations.verl was tested with verl {TESTED_VERL}, found {verl.__version__}; it overrides "
                  "private RayPPOTrainer methods, run tests/core/test_verl.py before trusting it", stacklevel=2)
SCORE_KEY = "rm_scores"  # what verl's extract_reward reads; it becomes `token_level_scores`


def rollout_scores(data: DataProto, score_key: str = SCORE_KEY) -> torch.Tensor:
    """One float64 score per row: a `[rows, tokens]` tensor summed over `response_mask` (verl puts a
    sequence's reward on its last response token), or a `[rows]` tensor as it is."""
    if data.batch is None or score_key not in data.batch.keys():
        raise ValueError(f"pods: the batch has no '{score_key}' to select by (rewards are not computed yet)")
    scores = data.batch[score_key].detach().to("cpu", torch.float64)
    if scores.dim() == 2:
        if "response_mask" in data.batch.keys():
            scores = scores * data.batch["response_mask"].to("cpu", torch.float64)
        scores = scores.sum(dim=-1)
    if scores.dim() != 1:
        shape = tuple(data.batch[score_key].shape)
        raise ValueError(f"pods: '{score_key}' must be [rows] or [rows, tokens], got {shape}")
    return scores


def group_rows(uids, n: int | None = None) -> np.ndarray:
    """Row indices `[G, n]` of each prompt's rollouts, groups in order of first appearance and rows in
    batch order within a group. Groups of unequal size are refused (max-variance selection needs
    every prompt to have the same n)."""
    uids = np.asarray(uids)
    _, first, inverse, counts = np.unique(uids, return_index=True, return_inverse=True, return_counts=True)
    if len(set(counts.tolist())) > 1 or (n is not None and counts[0] != n):
        sizes = sorted(set(counts.tolist()))
        raise ValueError(f"pods: every prompt id (uid) needs the same number of rollouts"
                         f"{'' if n is None else f' (n={n})'}; found groups of {sizes}")
    rank = np.empty_like(first)
    rank[np.argsort(first, kind="stable")] = np.arange(len(first))  # group number by first appearance
    order = np.argsort(rank[inverse.reshape(-1)], kind="stable")
    return order.reshape(len(first), counts[0])


def downsample(data: DataProto, m: int, rule: str = "max_variance", *, divisor: int = 1, n: int | None = None,
               score_key: str = SCORE_KEY, generator: torch.Generator | None = None) -> tuple[DataProto, dict]:
    """The kept rows of `data` and the step's PODS metrics.

    Groups rows by `non_tensor_batch["uid"]`, scores each (`rollout_scores`), keeps `m` per group by
    `pods.selection.select(scores[G, n], m, rule)`, and, where `G * m` is not a multiple of
    `divisor`, drops the fewest whole groups that makes it one, those whose kept scores vary the
    least first (ties: the later group). The kept rows stay in batch order. Returns a new
    `DataProto` (`data.select_idxs`: every tensor and non-tensor field indexed alike, `meta_info`
    shared) and metrics: rollouts generated and trained, groups and groups trimmed, the mean score
    of all and of the kept rollouts, and the mean over groups of the (population) variance of the
    scores, generated and kept.
    """
    if "uid" not in data.non_tensor_batch:
        raise ValueError("pods: the batch has no non_tensor_batch['uid'] (the prompt id verl groups rollouts by)")
    if isinstance(divisor, bool) or not isinstance(divisor, int) or divisor < 1:
        raise ValueError(f"pods: divisor must be a positive integer, got {divisor!r}")
    rows = group_rows(data.non_tensor_batch["uid"], n)  # [G, n]
    scores = rollout_scores(data, score_key)[torch.from_numpy(rows)]  # [G, n]
    kept = select(scores, m, rule, generator=generator).numpy()  # [G, m], positions within each group
    kept_rows = np.take_along_axis(rows, kept, axis=1)
    kept_scores = scores.gather(1, torch.from_numpy(kept))
    kept_var = kept_scores.var(dim=1, unbiased=False).numpy()

    G = len(rows)
    unit = divisor // math.gcd(m, divisor)  # groups whose m rows make a multiple of divisor
    trimmed = G % unit
    if trimmed == G:
        raise ValueError(f"pods: {G} groups of m={m} rollouts cannot be trimmed by whole groups to a multiple of "
                         f"{divisor} rows (it takes {unit} groups); raise data.train_batch_size")
    keep_groups = np.sort(np.lexsort((-np.arange(G), kept_var))[trimmed:])
    out = data.select_idxs(np.sort(kept_rows[keep_groups].reshape(-1)))
    metrics = {
        "pods/rollouts_generated": len(data),
        "pods/rollouts_trained": len(out),
        "pods/groups": G,
        "pods/groups_trimmed": int(trimmed),
        "pods/generated_score_mean": scores.mean().item(),
        "pods/kept_score_mean": kept_scores[torch.from_numpy(keep_groups)].mean().item(),
        "pods/generated_group_score_var": scores.var(dim=1, unbiased=False).mean().item(),
        "pods/kept_group_score_var": float(kept_var[keep_groups].mean()),
    }
    return out, metrics


class PODSConfigError(ValueError):
    """A `pods` setting verl cannot run; the message is one line starting `pods:`."""


@dataclass(frozen=True)
class PODSSettings:
    n: int  # actor_rollout_ref.rollout.n: rollouts generated per prompt
    m: int  # pods.m: rollouts kept per prompt
    rule: str  # pods.rule: a rule of pods.selection
    seed: int  # pods.seed: the `random` rule's generator


def pods_settings(config) -> PODSSettings:
    """The `pods` keys of a composed verl config, checked against the rest of it (no worker needed)."""
    def get(key, default=None):
        return OmegaConf.select(config, key, default=default)

    def refuse(message):
        raise PODSConfigError(f"pods: {message}")

    if get("pods") is None:
        refuse("the config has no `pods` section: run `python -m pods.integrations.verl`, whose config adds pods.m "
               "and pods.rule")
    n, m, rule, seed = get("actor_rollout_ref.rollout.n"), get("pods.m"), get("pods.rule"), get("pods.seed", 0)
    if isinstance(m, bool) or not isinstance(m, int):
        refuse(f"pods.m (rollouts kept per prompt) must be an integer, got {m!r}")
    if not 2 <= m < n:
        refuse(f"pods.m must satisfy 2 <= m < n = actor_rollout_ref.rollout.n, got m={m}, n={n} "
               "(m = n is verl's own GRPO: run verl's trainer)")
    if rule not in SELECTION_RULES or rule == "identity":
        refuse(f"pods.rule must be one of {sorted(set(SELECTION_RULES) - {'identity'})}, got {rule!r}")
    if get("trainer.use_v1", False):
        refuse("the plugin subclasses verl's RayPPOTrainer; set trainer.use_v1=False (the V1 trainer is not "
               "supported)")
    if not get("trainer.balance_batch", True):
        refuse("set trainer.balance_batch=True: rollouts are dropped inside verl's batch balancing, which then "
               "balances the kept ones")
    if str(get("algorithm.adv_estimator")) != "grpo":
        refuse(f"algorithm.adv_estimator must be grpo, got {get('algorithm.adv_estimator')}")
    if get("reward.reward_model.enable", False) and not get("reward.reward_model.enable_resource_pool", False):
        refuse("async reward mode refused: a reward model colocated with the actor scores after the point where "
               "PODS drops rollouts; set reward.reward_model.enable_resource_pool=True")
    if get("reward_model.launch_reward_fn_async", False):
        refuse("async reward mode refused: reward_model.launch_reward_fn_async=True has no rewards where PODS "
               "drops rollouts")
    gpus = get("trainer.n_gpus_per_node") * get("trainer.nnodes")
    sizes = {"data.train_batch_size": get("data.train_batch_size"),
             "actor_rollout_ref.actor.ppo_mini_batch_size": get("actor_rollout_ref.actor.ppo_mini_batch_size")}
    if get("critic.enable", False):
        sizes["critic.ppo_mini_batch_size"] = get("critic.ppo_mini_batch_size")
    for key, size in sizes.items():
        if size * m % gpus:
            refuse(f"{key} * pods.m = {size} * {m} rollouts must split evenly over the {gpus} GPUs")
    if isinstance(seed, bool) or not isinstance(seed, int):
        refuse(f"pods.seed must be an integer, got {seed!r}")
    return PODSSettings(n=n, m=m, rule=rule, seed=seed)


@contextmanager
def rollout_n_read_as(config, m: int):
    """`actor_rollout_ref.rollout.n` reads `m` inside the block (on this process's config only)."""
    n = config.actor_rollout_ref.rollout.n
    config.actor_rollout_ref.rollout.n = m
    try:
        yield
    finally:
        config.actor_rollout_ref.rollout.n = n


class PODSRayPPOTrainer(RayPPOTrainer):
    """verl's `RayPPOTrainer` that trains on `pods.m` of the `actor_rollout_ref.rollout.n` rollouts per prompt.

    Construct it as verl's trainer; the `pods` keys are checked first (`pods_settings`).
    """

    def __init__(self, config, *args, **kwargs):
        self.pods = pods_settings(config)
        self.pods_generator = torch.Generator().manual_seed(self.pods.seed)
        super().__init__(config, *args, **kwargs)

    def pods_divisor(self) -> int:
        """Rows the kept batch must be a multiple of: the actor's data-parallel ranks and the rows of one
        update mini-batch (the critic's too, when there is one)."""
        divisor = math.lcm(self._get_dp_size(self.actor_rollout_wg, "actor"),
                           self.config.actor_rollout_ref.actor.ppo_mini_batch_size * self.pods.m)
        if self.use_critic:
            divisor = math.lcm(divisor, self.config.critic.ppo_mini_batch_size * self.pods.m)
        return divisor

    def _balance_batch(self, batch: DataProto, metrics, logging_prefix="global_seqlen", keep_minibatch=False):
        kept, pods_metrics = downsample(batch, self.pods.m, self.pods.rule, divisor=self.pods_divisor(),
                                        n=self.pods.n, generator=self.pods_generator)
        batch.batch, batch.non_tensor_batch = kept.batch, kept.non_tensor_batch  # in place: `fit` holds `batch`
        metrics.update(pods_metrics)
        return super()._balance_batch(batch, metrics, logging_prefix=logging_prefix, keep_minibatch=keep_minibatch)

    def _update_actor(self, batch: DataProto) -> DataProto:
        with rollout_n_read_as(self.config, self.pods.m):
            return super()._update_actor(batch)

    def _update_critic(self, batch: DataProto) -> DataProto:
        with rollout_n_read_as(self.config, self.pods.m):
            return super()._update_critic(batch)


class _PODSTaskRunner(main_ppo_v0.TaskRunner.__ray_actor_class__):
    """verl's legacy task runner building `PODSRayPPOTrainer`. verl's `run` names `RayPPOTrainer`
    directly, so this runner rebinds that one name in its own Ray actor process and runs verl's `run`."""

    def run(self, config):
        main_ppo_v0.RayPPOTrainer = PODSRayPPOTrainer
        return super().run(config)


def main():
    """`python -m pods.integrations.verl KEY=VALUE ...`: verl's PPO entry point with PODSRayPPOTrainer."""
    import hydra

    @hydra.main(config_path="verl_config", config_name="pods_ppo_trainer", version_base=None)
    def run(config):
        import ray
        from verl.trainer.main_ppo import run_ppo
        from verl.trainer.ppo.utils import need_critic, need_reference_policy
        from verl.utils.config import validate_config
        from verl.utils.device import auto_set_device

        auto_set_device(config)
        try:
            pods_settings(config)  # before Ray and any worker
        except PODSConfigError as error:
            raise SystemExit(str(error)) from None  # one line (Hydra reports an Exception with a traceback)
        validate_config(config=config, use_reference_policy=need_reference_policy(config),
                        use_critic=need_critic(config))
        run_ppo(config, task_runner_class=ray.remote(num_cpus=1)(_PODSTaskRunner))

    run()


if __name__ == "__main__":
    main()
