"""PODS in verl (pods.integrations.verl), against the real verl on a CPU.

verl pins transformers below the study's, so these tests run in the environment of
scripts/verl_env.sh (`.venvs/verl/bin/python -m pytest tests/core/test_verl.py`, CI's `verl` stage)
and skip elsewhere (with PODS_REQUIRE_VERL=1, as CI sets it, they fail instead). What runs here:
the DataProto function against `pods.selection.select` and brute force, the config checks, the
example's config through verl's own validation, the trainer's hook through verl's real
`_balance_batch` and `_update_actor` (up to the worker call) on a real `DataProto`, and verl's real
`RayPPOTrainer.__init__` and `fit` for two steps with its Ray workers replaced by recorders
(generation, rewards, log-probs and the update are verl's GPU workers: not here).
"""
import itertools
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

if os.environ.get("PODS_REQUIRE_VERL"):  # CI's verl stage: an environment without verl is a failure, not a skip
    import verl  # noqa: F401
else:
    pytest.importorskip("verl", reason="verl is not installed: bash scripts/verl_env.sh (its own environment)")
from hydra import compose, initialize_config_dir  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from verl import DataProto  # noqa: E402
from verl.trainer.ppo.utils import need_critic, need_reference_policy  # noqa: E402
from verl.utils.config import validate_config  # noqa: E402

import pods.integrations.verl as pods_verl  # noqa: E402
from pods.integrations.verl import (  # noqa: E402
    PODSConfigError,
    PODSRayPPOTrainer,
    downsample,
    group_rows,
    pods_settings,
)
from pods.selection import SELECTION_RULES, select  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
CONFIG_DIR = str(Path(pods_verl.__file__).parent / "verl_config")
RULES = sorted(set(SELECTION_RULES) - {"identity"})
PROMPT, RESPONSE = 3, 6  # token widths of the fake batches


def make_batch(G: int, n: int, seed: int, *, shuffle: bool = True, scores=None) -> DataProto:
    """A verl-shaped batch of G prompts x n rollouts: left-padded prompts, right-padded responses,
    `rm_scores` on each response's last token, a row id written into the tokens and a non-tensor
    field, rows shuffled as verl's balancing leaves them."""
    rng = np.random.default_rng(seed)
    rows = G * n
    if scores is None:
        scores = rng.integers(0, 3, rows) / 2  # few levels: ties, as with 0/1 correctness
    scores = torch.as_tensor(np.asarray(scores, dtype=np.float32).reshape(rows))
    lengths = torch.as_tensor(rng.integers(1, RESPONSE + 1, rows))
    response_mask = (torch.arange(RESPONSE)[None, :] < lengths[:, None]).long()
    attention_mask = torch.cat([torch.ones(rows, PROMPT, dtype=torch.long), response_mask], dim=1)
    input_ids = torch.arange(rows)[:, None] * 100 + torch.arange(PROMPT + RESPONSE)[None, :]
    rm_scores = torch.zeros(rows, RESPONSE)
    rm_scores[torch.arange(rows), lengths - 1] = scores
    data = {
        "input_ids": input_ids, "attention_mask": attention_mask, "response_mask": response_mask,
        "position_ids": (attention_mask.cumsum(1) - 1).clamp(min=0), "prompts": input_ids[:, :PROMPT],
        "responses": input_ids[:, PROMPT:], "rm_scores": rm_scores,
        "uid": np.array([f"prompt-{g}" for g in range(G) for _ in range(n)], dtype=object),
        "row": np.arange(rows), "data_source": np.array(["gsm8k"] * rows, dtype=object),
    }
    order = torch.as_tensor(rng.permutation(rows) if shuffle else np.arange(rows))
    batch = DataProto.from_single_dict(data, meta_info={"temperature": 1.0})
    batch.reorder(order)
    return batch


def expected_rows(batch: DataProto, m: int, rule: str, generator=None) -> set[int]:
    """The kept row ids straight from `select`: groups in order of first appearance, rows in batch order."""
    groups: dict[str, list[int]] = {}
    for position, uid in enumerate(batch.non_tensor_batch["uid"]):
        groups.setdefault(uid, []).append(position)
    positions = np.array(list(groups.values()))
    scores = batch.batch["rm_scores"].double().sum(1)[torch.as_tensor(positions)]
    kept = select(scores, m, rule, generator=generator).numpy()
    return set(batch.non_tensor_batch["row"][np.take_along_axis(positions, kept, 1)].reshape(-1).tolist())


def assert_aligned(out: DataProto, source: DataProto):
    """Every field of every kept row is that row's, whatever its position."""
    rows = out.non_tensor_batch["row"]
    where = {row: i for i, row in enumerate(source.non_tensor_batch["row"])}
    index = torch.as_tensor([where[row] for row in rows])
    for key in source.batch.keys():
        assert torch.equal(out.batch[key], source.batch[key][index]), key
    for key in source.non_tensor_batch:
        assert (out.non_tensor_batch[key] == source.non_tensor_batch[key][index.numpy()]).all(), key
    assert torch.equal(out.batch["input_ids"][:, 0] // 100, torch.as_tensor(rows.astype(np.int64)))
    assert out.meta_info == source.meta_info


@pytest.mark.parametrize("rule", RULES)
def test_downsample_keeps_what_select_keeps_with_every_field_aligned(rule):
    for seed in range(12):
        rng = np.random.default_rng(seed)
        G, n = int(rng.integers(1, 7)), int(rng.integers(3, 10))
        m = int(rng.integers(2, n))
        batch = make_batch(G, n, seed)
        out, metrics = downsample(batch, m, rule, generator=torch.Generator().manual_seed(seed))
        assert len(out) == G * m and metrics["pods/rollouts_trained"] == G * m
        assert metrics["pods/rollouts_generated"] == G * n and metrics["pods/groups_trimmed"] == 0
        assert set(out.non_tensor_batch["row"].tolist()) == expected_rows(batch, m, rule,
                                                                          torch.Generator().manual_seed(seed))
        assert_aligned(out, batch)
        positions = [np.flatnonzero(batch.non_tensor_batch["row"] == row)[0] for row in out.non_tensor_batch["row"]]
        assert positions == sorted(positions)  # kept rows stay in batch order
        for uid in set(batch.non_tensor_batch["uid"]):
            assert (out.non_tensor_batch["uid"] == uid).sum() == m


def test_max_variance_keeps_the_most_varied_subset_by_brute_force():
    for seed in range(20):
        rng = np.random.default_rng(100 + seed)
        G, n, m = 3, 7, int(rng.integers(2, 7))
        scores = rng.normal(size=G * n).round(1)  # ties included
        batch = make_batch(G, n, seed, scores=scores)
        out, metrics = downsample(batch, m, "max_variance")
        kept_var = []
        for g in range(G):
            group = scores[g * n:(g + 1) * n]
            best = max(np.var(group[list(c)]) for c in itertools.combinations(range(n), m))
            rows = [r for r in out.non_tensor_batch["row"] if g * n <= r < (g + 1) * n]
            assert np.var(scores[rows]) == pytest.approx(best, abs=1e-6)
            kept_var.append(np.var(scores[rows]))
        assert metrics["pods/kept_group_score_var"] == pytest.approx(np.mean(kept_var), rel=1e-5)
        assert metrics["pods/generated_group_score_var"] == pytest.approx(
            np.mean([np.var(scores[g * n:(g + 1) * n]) for g in range(G)]), rel=1e-5)
        assert metrics["pods/generated_score_mean"] == pytest.approx(scores.mean(), abs=1e-6)


def test_the_kept_count_is_trimmed_by_whole_groups_the_least_varied_first():
    n, m = 6, 3
    # groups whose kept variance is known: constant groups (0) and spread ones, in a known order
    spreads = [0.5, 0.0, 2.0, 1.0, 0.0]  # group 1 and 4 tie at zero: the later one (4) goes first
    scores = np.concatenate([np.array([0, 0, 0, 1, 1, 1]) * s for s in spreads])
    batch = make_batch(len(spreads), n, 0, scores=scores)
    # divisible already: 5 groups x 3 = 15 rows, divisor 5 -> nothing dropped (the even edge)
    out, metrics = downsample(batch, m, divisor=5)
    assert len(out) == 15 and metrics["pods/groups_trimmed"] == 0
    # divisor 4: gcd(3, 4) = 1, so whole groups in multiples of 4 -> 4 groups kept, one trimmed
    out, metrics = downsample(batch, m, divisor=4)
    assert len(out) == 12 and len(out) % 4 == 0 and metrics["pods/groups_trimmed"] == 1
    assert set(out.non_tensor_batch["uid"]) == {"prompt-0", "prompt-1", "prompt-2", "prompt-3"}
    assert_aligned(out, batch)
    # divisor 6: gcd(3, 6) = 3, groups in pairs -> 4 kept; divisor 9: triples -> 3 kept, two zero-spread dropped
    assert len(downsample(batch, m, divisor=6)[0]) == 12
    out, metrics = downsample(batch, m, divisor=9)
    assert len(out) == 9 and metrics["pods/groups_trimmed"] == 2
    assert set(out.non_tensor_batch["uid"]) == {"prompt-0", "prompt-2", "prompt-3"}
    assert metrics["pods/kept_group_score_var"] == pytest.approx(np.mean([np.var([0, 0, 1]) * s * s
                                                                          for s in (0.5, 2.0, 1.0)]))
    # the other edge: fewer groups than one multiple holds -> refused, naming the fix
    with pytest.raises(ValueError, match=r"^pods: 5 groups of m=3 rollouts cannot be trimmed .* multiple of 18 rows"):
        downsample(batch, m, divisor=18)


def test_random_groups_trimmed_to_any_divisor_keep_select_s_rows_of_the_groups_kept():
    for seed in range(15):
        rng = np.random.default_rng(seed)
        G, n = int(rng.integers(2, 12)), int(rng.integers(3, 9))
        m, divisor = int(rng.integers(2, n)), int(rng.integers(1, 9))
        batch = make_batch(G, n, seed)
        unit = divisor // math.gcd(m, divisor)
        if G < unit:
            with pytest.raises(ValueError, match="^pods: "):
                downsample(batch, m, divisor=divisor)
            continue
        out, metrics = downsample(batch, m, divisor=divisor)
        assert len(out) % divisor == 0 and metrics["pods/groups_trimmed"] == G % unit
        assert set(out.non_tensor_batch["row"].tolist()) <= expected_rows(batch, m, "max_variance")
        assert_aligned(out, batch)


def test_scores_may_be_per_sequence_or_token_level_rewards_and_only_response_tokens_count():
    batch = make_batch(4, 5, 3)
    reference = downsample(batch, 2)[0].non_tensor_batch["row"]
    per_sequence = make_batch(4, 5, 3)
    per_sequence.batch["sequence_scores"] = per_sequence.batch["rm_scores"].sum(1)
    assert (downsample(per_sequence, 2, score_key="sequence_scores")[0].non_tensor_batch["row"] == reference).all()
    masked = make_batch(4, 5, 3)
    masked.batch["token_level_rewards"] = masked.batch["rm_scores"] + 5 * (1 - masked.batch["response_mask"])
    assert (downsample(masked, 2, score_key="token_level_rewards")[0].non_tensor_batch["row"] == reference).all()


def test_bad_batches_are_refused_in_one_line():
    batch = make_batch(3, 4, 0)
    uneven = batch.select_idxs(np.arange(len(batch) - 1))
    for call, message in [
        (lambda: downsample(uneven, 2), r"^pods: every prompt id \(uid\) needs the same number of rollouts; "
                                        r"found groups of \[3, 4\]$"),
        (lambda: downsample(batch, 2, n=8), r"^pods: .* \(n=8\); found groups of \[4\]$"),
        (lambda: downsample(batch, 2, score_key="token_level_scores"), r"^pods: the batch has no 'token_level_scores'"),
        (lambda: downsample(batch, 2, divisor=0), r"^pods: divisor must be a positive integer"),
        (lambda: downsample(batch, 2, "nope"), r"selection rule"),
    ]:
        with pytest.raises(ValueError, match=message) as error:
            call()
        assert "\n" not in str(error.value)
    no_uid = make_batch(3, 4, 0)
    no_uid.non_tensor_batch.pop("uid")
    with pytest.raises(ValueError, match=r"^pods: the batch has no non_tensor_batch\['uid'\]"):
        downsample(no_uid, 2)


def test_group_rows_orders_groups_by_first_appearance_and_rows_by_position():
    assert group_rows(np.array(["b", "a", "b", "c", "a", "c"], dtype=object)).tolist() == [[0, 2], [1, 4], [3, 5]]


# --- the config: `pods` keys checked against verl's config, before any worker -------------------------

GOOD = ["actor_rollout_ref.rollout.n=8", "pods.m=4", "data.train_batch_size=16",
        "actor_rollout_ref.actor.ppo_mini_batch_size=8", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=2", "actor_rollout_ref.model.path=unused",
        "trainer.n_gpus_per_node=4", "trainer.nnodes=1"]


def composed(overrides):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        return compose("pods_ppo_trainer", overrides=list(overrides))


def test_the_plugin_config_is_verl_s_with_the_pods_keys_and_passes_verl_s_validation():
    config = composed(GOOD)
    assert pods_settings(config) == pods_verl.PODSSettings(n=8, m=4, rule="max_variance", seed=0)
    assert config.trainer.use_v1 is False and config.trainer.balance_batch is True
    validate_config(config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))


@pytest.mark.parametrize("override, message", [
    ("pods.m=8", r"pods.m must satisfy 2 <= m < n = actor_rollout_ref.rollout.n, got m=8, n=8"),
    ("pods.m=1", r"got m=1, n=8"),
    ("pods.m=2.5", r"pods.m \(rollouts kept per prompt\) must be an integer, got 2.5"),
    ("pods.rule=identity", r"pods.rule must be one of \['max_abs_advantage', 'max_reward', 'max_variance', 'random'\]"),
    ("pods.rule=top", r"got 'top'"),
    ("trainer.use_v1=True", r"set trainer.use_v1=False"),
    ("trainer.balance_batch=False", r"set trainer.balance_batch=True"),
    ("algorithm.adv_estimator=gae", r"algorithm.adv_estimator must be grpo, got gae"),
    ("reward.reward_model.enable=True", r"async reward mode refused: a reward model colocated"),
    ("+reward_model.launch_reward_fn_async=True", r"async reward mode refused: reward_model.launch_reward_fn_async"),
    ("trainer.n_gpus_per_node=3", r"data.train_batch_size \* pods.m = 16 \* 4 rollouts must split evenly over the 3"),
    ("actor_rollout_ref.actor.ppo_mini_batch_size=1 trainer.n_gpus_per_node=8",
     r"actor_rollout_ref.actor.ppo_mini_batch_size \* pods.m = 1 \* 4 rollouts must split evenly over the 8 GPUs"),
    ("pods.seed=x", r"pods.seed must be an integer"),
])
def test_bad_pods_settings_are_refused_in_one_line(override, message):
    with pytest.raises(PODSConfigError, match=r"^pods: .*" + message) as error:
        pods_settings(composed(GOOD + override.split()))
    assert "\n" not in str(error.value)


def test_a_colocated_reward_model_on_its_own_pool_is_accepted():
    config = composed(GOOD + ["reward.reward_model.enable=True", "reward.reward_model.enable_resource_pool=True"])
    assert pods_settings(config).m == 4


def test_a_config_without_pods_keys_is_refused():
    with pytest.raises(PODSConfigError, match=r"^pods: the config has no `pods` section"):
        pods_settings(OmegaConf.create({"actor_rollout_ref": {"rollout": {"n": 8}}}))


def example_arguments(tmp_path, **env) -> list[str]:
    """The Hydra overrides examples/verl_gsm8k_pods.sh passes to `python -m pods.integrations.verl`."""
    recorder = tmp_path / "python"
    recorder.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$@\" > {tmp_path / 'argv'}\n")
    recorder.chmod(0o755)
    subprocess.run(["bash", str(REPO / "examples" / "verl_gsm8k_pods.sh"), "trainer.total_epochs=1"], check=True,
                   env={**os.environ, "PYTHON": str(recorder), **env})
    argv = (tmp_path / "argv").read_text().splitlines()
    assert argv[:2] == ["-m", "pods.integrations.verl"]
    return argv[2:]


@pytest.mark.parametrize("gpus", ["8", "1"])
def test_the_example_config_passes_verl_s_and_the_plugin_s_checks(tmp_path, gpus):
    arguments = example_arguments(tmp_path, NGPUS=gpus)
    config = composed(arguments)
    assert pods_settings(config) == pods_verl.PODSSettings(n=64, m=16, rule="max_variance", seed=0)
    assert config.trainer.n_gpus_per_node == int(gpus) and config.trainer.total_epochs == 1
    validate_config(config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    assert config.data.train_files.endswith("gsm8k/train.parquet")


def test_the_command_refuses_a_bad_setting_in_one_line_before_starting_ray(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([sys.executable, "-m", "pods.integrations.verl", *GOOD, "pods.m=8"],  # Hydra writes
                            capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)  # outputs/ here
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        "pods: pods.m must satisfy 2 <= m < n = actor_rollout_ref.rollout.n, got m=8, n=8 "
        "(m = n is verl's own GRPO: run verl's trainer)")
    assert "ray init kwargs" not in result.stdout + result.stderr  # verl's run_ppo prints them before ray.init


# --- the trainer's hook, through verl's own methods ---------------------------------------------------

class Recorder:
    """Stands in for a verl worker group: answers the dispatch query and records what it was sent."""

    def __init__(self, dp: int):
        self._dispatch_info = {"actor": list(range(dp)) * 2}  # two model-parallel ranks per data-parallel rank
        self.calls = []

    def update_actor(self, td):
        from verl.utils import tensordict_utils as tu

        self.calls.append(("update_actor", len(td), tu.get(td, "mini_batch_size")))
        return tu.get_tensordict({"loss": torch.zeros(1)}, non_tensor_dict={"metrics": {"mfu": 0.0, "pg_loss": 0.0}})


def bare_trainer(overrides, dp: int) -> PODSRayPPOTrainer:
    """The subclass with its config, checks and worker handle, without Ray workers (`__init__` builds them)."""
    config = composed(GOOD + overrides)
    trainer = PODSRayPPOTrainer.__new__(PODSRayPPOTrainer)
    trainer.config, trainer.pods = config, pods_settings(config)
    trainer.pods_generator = torch.Generator().manual_seed(0)
    trainer.actor_rollout_wg, trainer.use_critic, trainer.use_prefix_grouper = Recorder(dp), False, False
    trainer.distillation_config = None
    return trainer


def test_the_hook_drops_rows_in_place_then_verl_balances_the_kept_ones():
    trainer = bare_trainer(["trainer.n_gpus_per_node=4"], dp=4)
    batch = make_batch(16, 8, 7)
    expected = expected_rows(batch, 4, "max_variance")
    source = make_batch(16, 8, 7)
    metrics = {}
    trainer._balance_batch(batch, metrics)  # what fit calls after generation, before the reward and old_log_prob
    assert len(batch) == 16 * 4 and set(batch.non_tensor_batch["row"].tolist()) == expected
    assert_aligned(batch, source)
    assert metrics["pods/rollouts_generated"] == 128 and metrics["pods/rollouts_trained"] == 64
    assert "global_seqlen/balanced_max" in metrics  # verl's balance ran on the kept rows
    # verl's balance: 4 equal partitions of 16 kept rows, their token counts close
    tokens = batch.batch["attention_mask"].sum(1).view(4, 16).sum(1)
    assert tokens.max() - tokens.min() <= batch.batch["attention_mask"].sum(1).max()


def test_the_update_mini_batch_counts_ppo_mini_batch_size_prompts_of_m_rollouts():
    trainer = bare_trainer([], dp=2)
    batch = make_batch(16, 8, 1)
    trainer._balance_batch(batch, {})
    trainer._update_actor(batch)  # verl's own method up to the worker call
    assert trainer.actor_rollout_wg.calls == [("update_actor", 16 * 4, 8 * 4)]  # ppo_mini_batch_size * m rows
    assert trainer.config.actor_rollout_ref.rollout.n == 8  # n again outside the update
    assert trainer.pods_divisor() == 32  # lcm(dp 2, 8 prompts x 4 kept)


# --- verl's own training loop, its Ray workers replaced by recorders -----------------------------------

class Prompts(torch.utils.data.Dataset):
    """Items shaped as verl's RLHFDataset makes them (the agent loop tokenises the raw prompt)."""

    def __len__(self):
        return 8

    def __getitem__(self, index):
        return {"raw_prompt": [{"role": "user", "content": f"question {index}"}], "dummy_tensor": torch.tensor([0]),
                "data_source": "fake", "index": index, "extra_info": {}}


class Generation:
    """Stands in for verl's agent loop: n responses per prompt, each scored into `rm_scores` as verl's
    reward loop does while generating. Scores come from a seeded generator, so a test can recompute them."""

    def __init__(self):
        self.rng, self.calls = np.random.default_rng(0), []

    def generate_sequences(self, gen_batch):
        rows = len(gen_batch)
        self.calls.append(rows)
        scores = self.rng.integers(0, 2, rows).astype(np.float32)  # 0/1 correctness
        lengths = torch.as_tensor(self.rng.integers(1, RESPONSE + 1, rows))
        response_mask = (torch.arange(RESPONSE)[None, :] < lengths[:, None]).long()
        attention_mask = torch.cat([torch.ones(rows, PROMPT, dtype=torch.long), response_mask], dim=1)
        input_ids = torch.as_tensor(self.rng.integers(3, 50, (rows, PROMPT + RESPONSE))) * attention_mask
        rm_scores = torch.zeros(rows, RESPONSE)
        rm_scores[torch.arange(rows), lengths - 1] = torch.as_tensor(scores)
        return DataProto.from_single_dict({
            "prompts": input_ids[:, :PROMPT], "responses": input_ids[:, PROMPT:], "response_mask": response_mask,
            "input_ids": input_ids, "attention_mask": attention_mask,
            "position_ids": (attention_mask.cumsum(1) - 1).clamp(min=0), "rm_scores": rm_scores,
            "multi_modal_inputs": np.array([{} for _ in range(rows)], dtype=object),
        }, meta_info={"timing": {}})


class Workers(Recorder):
    """Actor, reference, the weight sync and the GPU count, as verl's driver calls them; log-probs are zeros."""

    def compute_log_prob(self, td):
        return self._log_probs("compute_log_prob", td)

    def compute_ref_log_prob(self, td):
        return self._log_probs("compute_ref_log_prob", td)

    def _log_probs(self, name, td):
        from verl.utils import tensordict_utils as tu

        self.calls.append((name, len(td)))
        tokens = td["input_ids"].values().shape[0]  # the no-padding layout verl sends
        return tu.get_tensordict({"log_probs": torch.zeros(tokens), "entropy": torch.zeros(tokens)},
                                 non_tensor_dict={"metrics": {"mfu": 0.0}})

    def get_n_gpus(self):  # as the resource pool manager
        return 2

    def update_weights(self, step):
        self.calls.append(("update_weights", step))

    def sleep_replicas(self):
        pass


def test_verl_s_fit_trains_on_m_of_n_rollouts_in_every_pass_after_the_reward(tmp_path, monkeypatch):
    """verl's `RayPPOTrainer.__init__` and `fit` for two steps, as written: generation gives n per prompt,
    and the old-log-prob, reference and update passes receive m per prompt."""
    from verl.trainer.ppo.ray_trainer import Role
    from verl.utils.dataset.rl_dataset import collate_fn

    logged = []

    class Tracking:
        def __init__(self, **_):
            pass

        def log(self, data, step):
            logged.append((step, data))

    monkeypatch.setattr("verl.utils.tracking.Tracking", Tracking)
    monkeypatch.chdir(tmp_path)
    config = composed(GOOD + ["trainer.n_gpus_per_node=2", "data.train_batch_size=4",
                              "actor_rollout_ref.actor.ppo_mini_batch_size=2",
                              "actor_rollout_ref.actor.use_kl_loss=True",
                              "trainer.total_epochs=1", "trainer.val_before_train=False", "trainer.test_freq=-1",
                              "trainer.save_freq=-1", "trainer.logger=[console]", "data.dataloader_num_workers=0"])
    trainer = PODSRayPPOTrainer(config=config, tokenizer=None, role_worker_mapping={Role.ActorRollout: object},
                                resource_pool_manager=Workers(dp=2), train_dataset=Prompts(), val_dataset=Prompts(),
                                collate_fn=collate_fn)
    workers, generation = Workers(dp=2), Generation()
    # what init_workers would build: the worker groups, the rollout manager, the weight sync
    trainer.actor_rollout_wg = trainer.ref_policy_wg = workers
    trainer.async_rollout_manager, trainer.checkpoint_manager = generation, workers
    trainer.fit()

    n, m, prompts = 8, 4, 4
    assert generation.calls == [prompts * n] * 2
    passes = [call for call in workers.calls if call[0] != "update_weights"]
    assert passes == [("compute_log_prob", prompts * m), ("compute_ref_log_prob", prompts * m),
                      ("update_actor", prompts * m, 2 * m)] * 2
    assert [step for step, _ in logged] == [1, 2]
    for _, metrics in logged:
        assert metrics["pods/rollouts_generated"] == prompts * n and metrics["pods/rollouts_trained"] == prompts * m
        assert metrics["pods/groups_trimmed"] == 0
        assert metrics["pods/kept_group_score_var"] >= metrics["pods/generated_group_score_var"]
        assert "global_seqlen/balanced_max" in metrics and "critic/advantages/mean" in metrics
    assert config.actor_rollout_ref.rollout.n == n


def test_one_verl_version_is_pinned_and_tested_everywhere():
    import tomllib
    import verl

    extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["verl"]
    script = (REPO / "scripts" / "verl_env.sh").read_text()
    assert extra[0].startswith(f"verl=={pods_verl.TESTED_VERL};")
    assert f"VERL_VERSION={pods_verl.TESTED_VERL} " in script
    assert verl.__version__ == pods_verl.TESTED_VERL
    for name in ("_balance_batch", "_update_actor", "_update_critic", "_get_dp_size", "fit"):  # what the hook relies on
        assert name in vars(pods_verl.RayPPOTrainer), name


def test_the_plugin_imports_the_package_s_core_only(tmp_path):
    """In verl's environment (no study extra: its transformers is below the study's) the plugin needs the core alone."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([sys.executable, "-c", (
        "import sys, pods.integrations.verl\n"
        "print(sorted(m for m in sys.modules if m.startswith('pods')))")],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == str(
        ["pods", "pods.integrations", "pods.integrations.verl", "pods.registry", "pods.selection"])


def test_the_internals_relied_on_are_where_the_plugin_expects_them():
    """verl's fit reaches `_balance_batch` after generation and before the reward and old-log-prob passes,
    `_update_actor` sizes mini-batches by `rollout.n`, and the task runner builds `RayPPOTrainer` by name."""
    import inspect

    from verl.trainer import main_ppo_v0

    fit = inspect.getsource(pods_verl.RayPPOTrainer.fit)
    order = [fit.index(call) for call in ("generate_sequences(", "self._balance_batch(", "extract_reward(batch)",
                                          "self._compute_old_log_prob(batch)", "self._compute_ref_log_prob(batch)",
                                          "self._update_actor(batch)")]
    assert order == sorted(order)
    update = inspect.getsource(pods_verl.RayPPOTrainer._update_actor)
    assert "ppo_mini_batch_size * self.config.actor_rollout_ref.rollout.n" in update
    assert "trainer = RayPPOTrainer(" in inspect.getsource(main_ppo_v0.TaskRunner.__ray_actor_class__.run)


def test_the_task_runner_builds_the_plugin_s_trainer(monkeypatch):
    from verl.trainer import main_ppo_v0

    built = []
    monkeypatch.setattr(main_ppo_v0, "RayPPOTrainer", main_ppo_v0.RayPPOTrainer)  # restored after the test
    monkeypatch.setattr(main_ppo_v0.TaskRunner.__ray_actor_class__, "run",
                        lambda self, config: built.append((main_ppo_v0.RayPPOTrainer, config)))
    pods_verl._PODSTaskRunner().run("config")
    assert built == [(PODSRayPPOTrainer, "config")]
