"""PODS in TRL: the kept completions are `select`'s, only they reach log-probs, loss and backward, m = n is GRPO.

A tiny character-level model from a config, on CPU, no download. Each test builds a trainer in well under a second.
"""
import ast
import dataclasses
import inspect
import os
import re
import runpy
import socket
import tempfile
import textwrap
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

trl = pytest.importorskip("trl", reason='TRL is not installed: pip install "torch==<your torch>" -e ".[trl]"')
from datasets import Dataset  # noqa: E402
from packaging.specifiers import SpecifierSet  # noqa: E402
from transformers import TrainerCallback  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from helpers import char_tokenizer, save_tiny_base  # noqa: E402
from pods.grpo import kept_advantages  # noqa: E402
from pods.integrations.trl import TESTED_TRL, PODSGRPOConfig, PODSGRPOTrainer  # noqa: E402
from pods.selection import select  # noqa: E402

torch.set_num_threads(1)
N = 8  # completions generated per prompt in these tests
PROMPTS = ["ab?", "cdef?", "g?", "hij?"]


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A saved tiny policy: TRL builds its reference model from the policy's path when beta != 0."""
    return save_tiny_base(tmp_path_factory.mktemp("tiny"), n_layer=1, d_model=32, n_head=2, max_len=64)


class RecordingReward:
    """A reward with ties and spread (distinct characters, capped), remembering what it scored."""

    __name__ = "distinct_chars"

    def __init__(self, unscorable_every: int | None = None):
        self.unscorable_every = unscorable_every
        self.completion_ids: list[list[int]] = []
        self.rewards: list[float | None] = []

    def __call__(self, completions, completion_ids, **_):
        rewards = [min(len(set(c)), 4) / 4 for c in completions]
        if self.unscorable_every:
            rewards = [None if i % self.unscorable_every == 0 else r for i, r in enumerate(rewards)]
        self.completion_ids += completion_ids
        self.rewards += rewards
        return rewards


def make_trainer(base, tmp_path, cls=PODSGRPOTrainer, reward=None, dataset=None, trainer_kwargs=None, **overrides):
    settings = dict(
        output_dir=str(tmp_path / "out"), num_generations=N, per_device_train_batch_size=2 * N,
        max_completion_length=6, max_steps=1, learning_rate=1e-3, beta=0.0, loss_type="dapo",
        use_cpu=True, bf16=False, report_to="none", save_strategy="no", logging_strategy="no", disable_tqdm=True,
        seed=0, dataloader_num_workers=0,
    )
    settings.update(overrides)
    config = (PODSGRPOConfig if cls is PODSGRPOTrainer else GRPOConfig)(**settings)
    return cls(
        model=str(base), reward_funcs=[reward or RecordingReward()], args=config,
        train_dataset=dataset or Dataset.from_dict({"prompt": PROMPTS * 4}),
        processing_class=char_tokenizer(), **(trainer_kwargs or {}),
    )


def first_generation_batch(trainer):
    trainer.model.train()
    return next(iter(trainer.get_train_dataloader()))


def kept_rows(output) -> list[list[int]]:
    return [ids[mask.bool()].tolist() for ids, mask in zip(output["completion_ids"], output["completion_mask"])]


def expected_kept(reward: RecordingReward, m: int, rule: str) -> tuple[torch.Tensor, torch.Tensor, list[list[int]]]:
    """Rewards `[groups, n]`, kept indices `[groups, m]` by `select` and the kept completions, in order."""
    rewards = torch.tensor(reward.rewards, dtype=torch.float64).view(-1, N)
    kept = select(rewards, m, rule, generator=torch.Generator().manual_seed(0))  # the trainer seeds it with `seed`
    ids = [reward.completion_ids[g * N + k] for g in range(len(kept)) for k in kept[g].tolist()]
    return rewards, kept, ids


@pytest.mark.parametrize("rule", ["max_variance", "max_abs_advantage", "max_reward", "random"])
def test_kept_completions_are_select_of_the_same_rewards(base, tmp_path, rule):
    reward = RecordingReward()
    trainer = make_trainer(base, tmp_path, reward=reward, num_kept_generations=3, selection_rule=rule)
    batch = first_generation_batch(trainer)
    output = trainer._generate_and_score_completions(batch)

    assert len(reward.rewards) == len(batch) == 2 * N  # scored once, on every generated completion
    rewards, kept, ids = expected_kept(reward, 3, rule)
    assert kept_rows(output) == ids
    # advantages over the kept subset, the authors' normalisation
    torch.testing.assert_close(output["advantages"], kept_advantages(rewards, kept).flatten().float())
    # dapo's normaliser counts the kept tokens only
    assert output["num_items_in_batch"].item() == sum(map(len, ids)) < sum(map(len, reward.completion_ids))


def test_advantages_normalised_over_all_generated(base, tmp_path):
    reward = RecordingReward()
    trainer = make_trainer(base, tmp_path, reward=reward, num_kept_generations=4, normalize_advantages_over="all")
    output = trainer._generate_and_score_completions(first_generation_batch(trainer))
    rewards, kept, ids = expected_kept(reward, 4, "max_variance")
    assert kept_rows(output) == ids
    expected = kept_advantages(rewards, kept, normalize_over="all").flatten().float()
    torch.testing.assert_close(output["advantages"], expected)
    torch.testing.assert_close(torch.tensor(list(trainer._logs["advantages"])), expected)  # the completions table
    assert not torch.allclose(expected, kept_advantages(rewards, kept).flatten().float())  # the option matters


def test_cppo_keeps_the_update_size_and_fills_it_with_more_prompts(base, tmp_path):
    """CPPO (completion_allocation, max_abs_advantage, advantages over all n): a micro-step of 4 kept
    completions generates 4 * 8 / 2 = 16, two prompts of 8 instead of half a prompt, and keeps the 2 of
    each with the largest |advantage|."""
    reward = RecordingReward()
    trainer = make_trainer(base, tmp_path, reward=reward, per_device_train_batch_size=4, num_kept_generations=2,
                           selection_rule="max_abs_advantage", normalize_advantages_over="all",
                           completion_allocation=True)
    args = trainer.args
    assert (args.per_device_update_batch_size, args.per_device_train_batch_size, args.generation_batch_size) == (4, 16,
                                                                                                               16)
    args._allocate_completions()  # again (a config rebuilt from its fields): not scaled twice
    assert (args.per_device_update_batch_size, args.per_device_train_batch_size) == (4, 16)
    batch = first_generation_batch(trainer)
    assert len(batch) == 16 and len({x["prompt"] for x in batch}) == 2
    output = trainer._generate_and_score_completions(batch)
    rewards, kept, ids = expected_kept(reward, 2, "max_abs_advantage")
    assert len(reward.rewards) == 16 and kept_rows(output) == ids and len(ids) == 4  # the update's size
    distance = (rewards - rewards.mean(dim=1, keepdim=True)).abs()
    for g in range(len(kept)):  # every kept |advantage| at least every pruned one: CPPO's rule
        pruned = [j for j in range(N) if j not in kept[g].tolist()]
        assert distance[g, kept[g]].min() >= distance[g, pruned].max()
    torch.testing.assert_close(output["advantages"],
                               kept_advantages(rewards, kept, normalize_over="all").flatten().float())
    trainer.train()  # and TRL's own loop trains on it
    assert trainer.state.global_step == 1


def test_logged_columns_follow_the_kept_completions(base, tmp_path):
    """A reward function's `log_extra` column reaches TRL's completions table for the kept rows only."""
    reward = RecordingReward()

    def logging_reward(completions, completion_ids, log_extra, **kwargs):
        log_extra("row", list(range(len(reward.rewards), len(reward.rewards) + len(completions))))
        return reward(completions, completion_ids, **kwargs)

    trainer = make_trainer(base, tmp_path, reward=logging_reward, num_kept_generations=3)
    trainer._generate_and_score_completions(first_generation_batch(trainer))
    _, kept, _ = expected_kept(reward, 3, "max_variance")
    rows = (torch.arange(len(kept))[:, None] * N + kept).flatten().tolist()
    assert list(trainer._logs["extra"]["row"]) == rows
    assert list(trainer._logs["rewards"]["logging_reward"]) == [reward.rewards[i] for i in rows]


def test_unscorable_completions_rank_at_their_group_mean(base, tmp_path):
    reward = RecordingReward(unscorable_every=3)  # None for every third completion
    trainer = make_trainer(base, tmp_path, reward=reward, num_kept_generations=4)
    output = trainer._generate_and_score_completions(first_generation_batch(trainer))
    raw = torch.tensor([float("nan") if r is None else r for r in reward.rewards], dtype=torch.float64).view(-1, N)
    filled = torch.where(raw.isnan(), raw.nanmean(dim=1, keepdim=True), raw)
    kept = select(filled, 4, "max_variance")
    assert kept_rows(output) == [reward.completion_ids[g * N + k] for g in range(len(kept)) for k in kept[g].tolist()]
    unscorable_kept = torch.gather(raw, 1, kept).isnan().flatten()
    assert (output["advantages"][unscorable_kept] == 0).all()  # TRL's rule for rows without a reward


def test_logprob_passes_and_backward_see_only_the_kept_completions(base, tmp_path):
    """beta > 0 and steps_per_generation > gradient_accumulation_steps: TRL runs the reference and the old-policy
    passes in the generation step; every pass, with or without grad, must see the kept rows only."""
    reward = RecordingReward()
    m = 2
    trainer = make_trainer(base, tmp_path, reward=reward, num_kept_generations=m, beta=0.04, steps_per_generation=2,
                           max_steps=2)
    passes = []  # (grad enabled, rows, completion tokens)
    logps = trainer._get_per_token_logps_and_entropies

    def counting(model, input_ids, attention_mask, logits_to_keep, *args, **kwargs):
        tokens = attention_mask[:, -logits_to_keep:].sum().item()
        passes.append((torch.is_grad_enabled(), len(input_ids), tokens))
        return logps(model, input_ids, attention_mask, logits_to_keep, *args, **kwargs)

    trainer._get_per_token_logps_and_entropies = counting
    trainer.train()

    generated = len(reward.completion_ids)
    assert generated == 4 * N  # one generation batch: 2 micro-steps of 2 prompts
    _, _, ids = expected_kept(reward, m, "max_variance")
    kept_tokens = sum(map(len, ids))
    no_grad = [p for p in passes if not p[0]]
    backward = [p for p in passes if p[0]]
    assert [rows for _, rows, _ in no_grad] == [generated * m // N] * 2  # the old-policy and the reference pass
    assert all(tokens == kept_tokens for _, _, tokens in no_grad)
    assert [rows for _, rows, _ in backward] == [2 * m, 2 * m]  # per_device_train_batch_size * m / n per micro-step
    assert sum(tokens for _, _, tokens in backward) == kept_tokens < sum(map(len, reward.completion_ids))


@pytest.mark.parametrize(("loss_type", "rule", "normalize"), [
    ("dapo", "max_variance", "kept"), ("grpo", "identity", "kept"), ("bnpo", "max_reward", "all"),
    ("dr_grpo", "random", "kept"),
])
def test_keeping_all_equals_plain_grpo(base, tmp_path, loss_type, rule, normalize):
    """m = n: one optimiser step of 2 micro-steps gets GRPOTrainer's micro-batches, losses and summed gradient."""

    def one_step(cls, **pods):
        trainer = make_trainer(base, tmp_path / cls.__name__, cls=cls, loss_type=loss_type,
                               gradient_accumulation_steps=2, max_grad_norm=0.0, **pods)  # gradients unclipped
        seen = {"inputs": [], "losses": []}
        prepare, compute_loss = trainer._prepare_inputs, trainer.compute_loss

        def recording_prepare(batch):
            seen["inputs"].append(prepare(batch))
            return seen["inputs"][-1]

        def recording_loss(*args, **kwargs):
            seen["losses"].append(compute_loss(*args, **kwargs))
            return seen["losses"][-1]

        class Gradients(TrainerCallback):
            def on_pre_optimizer_step(self, *args, **kwargs):
                seen["grads"] = {name: p.grad.clone() for name, p in trainer.model.named_parameters()}

        trainer._prepare_inputs, trainer.compute_loss = recording_prepare, recording_loss
        trainer.add_callback(Gradients())
        torch.manual_seed(1)  # the same samples and the same shuffle of the generation batch
        trainer.train()
        return seen

    plain = one_step(GRPOTrainer)
    pods = one_step(PODSGRPOTrainer, num_kept_generations=N, selection_rule=rule, normalize_advantages_over=normalize)
    # "kept" is TRL's own advantage code: bit for bit. "all" is pods.grpo's, in float64: equal up to rounding.
    tol = dict(rtol=0, atol=0) if normalize == "kept" else {}
    assert len(plain["inputs"]) == len(pods["inputs"]) == 2
    for ours, theirs in zip(pods["inputs"], plain["inputs"]):
        assert ours.keys() == theirs.keys()
        for key in theirs:
            torch.testing.assert_close(ours[key], theirs[key], **tol, msg=key)
    for ours, theirs in zip(pods["losses"], plain["losses"]):
        torch.testing.assert_close(ours, theirs, **tol)
    assert any(grad.abs().sum() > 0 for grad in plain["grads"].values())
    for name, grad in plain["grads"].items():
        torch.testing.assert_close(pods["grads"][name], grad, **tol, msg=name)


DISTRIBUTED = [("max_variance", "kept"), ("random", "all")]  # random: one draw for all processes' groups


def _distributed_worker(rank, world, port, base, out_dir, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world))
    torch.set_num_threads(1)
    for rule, normalize in DISTRIBUTED:
        reward = RecordingReward()
        trainer = make_trainer(Path(base), Path(out_dir), reward=reward, num_kept_generations=3, selection_rule=rule,
                               normalize_advantages_over=normalize, beta=0.04, max_steps=2)
        output = trainer._generate_and_score_completions(first_generation_batch(trainer))
        trainer.train()  # the reference pass and two optimiser steps, in step on both processes
        out[(rank, rule)] = dict(ids=reward.completion_ids[: 2 * N], rewards=reward.rewards[: 2 * N],
                                 kept=kept_rows(output), advantages=output["advantages"].tolist(),
                                 num_items=output["num_items_in_batch"].item(), steps=trainer.state.global_step)
    torch.distributed.destroy_process_group()


@pytest.mark.slow
def test_two_processes_keep_their_slice_of_one_selection(base, tmp_path):
    """Rewards are gathered over processes; each process trains on its own groups' kept rows, selected once."""
    out = mp.Manager().dict()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_distributed_worker, args=(2, port, str(base), str(tmp_path), out), nprocs=2, join=True)
    for rule, normalize in DISTRIBUTED:
        ranks = [out[(rank, rule)] for rank in (0, 1)]
        ids = ranks[0]["ids"] + ranks[1]["ids"]  # the first generation batch, in process order
        rewards = torch.tensor(ranks[0]["rewards"] + ranks[1]["rewards"], dtype=torch.float64).view(-1, N)
        kept = select(rewards, 3, rule, generator=torch.Generator().manual_seed(0))
        expected = [ids[g * N + k] for g in range(len(kept)) for k in kept[g].tolist()]
        assert ranks[0]["kept"] + ranks[1]["kept"] == expected and len(ranks[0]["kept"]) == len(ranks[1]["kept"])
        advantages = kept_advantages(rewards, kept, normalize_over=normalize).flatten().float()
        torch.testing.assert_close(torch.tensor(ranks[0]["advantages"] + ranks[1]["advantages"]), advantages)
        assert ranks[0]["num_items"] == ranks[1]["num_items"] == sum(map(len, expected))  # kept tokens, all processes
        assert ranks[0]["steps"] == ranks[1]["steps"] == 2


@pytest.mark.parametrize(("overrides", "message"), [
    ({"num_kept_generations": N + 1}, "2 <= num_kept_generations <= num_generations"),
    ({"num_kept_generations": 1}, "2 <= num_kept_generations <= num_generations"),
    ({"num_kept_generations": 4, "selection_rule": "best"}, "unknown selection_rule 'best'"),
    ({"num_kept_generations": 4, "selection_rule": "identity"}, "'identity' keeps every completion"),
    ({"normalize_advantages_over": "group"}, "normalize_advantages_over must be 'kept' or 'all'"),
    ({"num_kept_generations": 3, "per_device_train_batch_size": 4, "gradient_accumulation_steps": 2},
     r"per_device_train_batch_size \* num_kept_generations / num_generations \(4 \* 3 / 8\)"),
    ({"num_kept_generations": 4, "normalize_advantages_over": "all", "scale_rewards": "batch"}, "scale_rewards"),
    ({"num_kept_generations": 4, "normalize_advantages_over": "all",
      "multi_objective_aggregation": "normalize_then_sum"}, "multi_objective_aggregation"),
    ({"completion_allocation": True}, "completion_allocation needs num_kept_generations < num_generations"),
    ({"completion_allocation": True, "num_kept_generations": N}, "num_kept_generations < num_generations"),
    ({"completion_allocation": True, "num_kept_generations": 3, "per_device_train_batch_size": 1},
     r"\(1 \* 8 / 3\) must be a whole number"),
    ({"per_device_update_batch_size": 4}, "set completion_allocation=True"),
])
def test_config_errors_name_the_problem(overrides, message, tmp_path):
    settings = dict(output_dir=str(tmp_path), num_generations=N, per_device_train_batch_size=N, use_cpu=True,
                    bf16=False, report_to="none")
    with pytest.raises(ValueError, match=message):
        PODSGRPOConfig(**{**settings, **overrides})


def test_trainer_errors_name_the_problem(base, tmp_path):
    with pytest.raises(TypeError, match="PODSGRPOConfig"):
        PODSGRPOTrainer(model=str(base), reward_funcs=[RecordingReward()],
                        args=GRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to="none"))

    def lookup(key: str) -> str:
        """Looks a key up.

        Args:
            key: the key.

        Returns:
            The value.
        """
        return key

    with pytest.raises(ValueError, match="does not support `tools`"):
        make_trainer(base, tmp_path, num_kept_generations=4, trainer_kwargs={"tools": [lookup]})
    images = Dataset.from_dict({"prompt": PROMPTS, "image": [None] * len(PROMPTS)})
    with pytest.raises(ValueError, match="text prompts only"):
        make_trainer(base, tmp_path, num_kept_generations=4, dataset=images)


def test_example_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the example's output_dir
    runpy.run_path(str(Path(__file__).parents[2] / "examples" / "trl_pods.py"), run_name="__main__")
    steps = [line for line in capsys.readouterr().out.splitlines() if line.startswith("step ")]
    assert len(steps) == 5 and all("of the 4 kept" in line for line in steps)


def _syntax(fn) -> ast.AST:
    return ast.parse(textwrap.dedent(inspect.getsource(fn)))


def _calls(fn, name: str) -> list[int]:
    """Lines of `fn` that call `name` (e.g. "self._generate")."""
    return [node.lineno for node in ast.walk(_syntax(fn))
            if isinstance(node, ast.Call) and ast.unparse(node.func) == name]


def test_trl_internals_relied_on_are_unchanged():
    """Fails when a TRL upgrade moves what PODSGRPOTrainer builds on; then re-read TRL's GRPOTrainer and re-pin."""
    import tomllib  # Python 3.11+, as TRL

    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    pins = [r for r in pyproject["project"]["optional-dependencies"]["trl"] if re.match(r"trl\b", r)]
    assert [SpecifierSet(re.sub(r"^trl|;.*$", "", pin)) for pin in pins] == [TESTED_TRL], "extra and TESTED_TRL differ"
    assert trl.__version__ in TESTED_TRL, f"installed trl {trl.__version__} is outside the tested trl{TESTED_TRL}"

    def params(fn):
        return list(inspect.signature(fn).parameters)

    assert params(GRPOTrainer._generate_and_score_completions) == ["self", "inputs"]
    assert params(GRPOTrainer._generate) == ["self", "prompts"]
    assert params(GRPOTrainer._calculate_rewards) == ["self", "inputs", "prompts", "completions",
                                                      "completion_ids_list"]
    # Training reaches generation through _prepare_inputs -> _generate_and_score_completions.
    assert _calls(GRPOTrainer._prepare_inputs, "self._generate_and_score_completions")
    # The replay: TRL's method generates and scores once each, generates before any log-prob pass, and groups its
    # advantages by self.num_generations.
    method = GRPOTrainer._generate_and_score_completions
    generate, rewards = _calls(method, "self._generate"), _calls(method, "self._calculate_rewards")
    assert len(generate) == 1 and len(rewards) == 1, "no longer one _generate and one _calculate_rewards call"
    assert generate[0] < min(_calls(method, "self._get_per_token_logps_and_entropies")), "log-probs before generation"
    assert "self.num_generations" in {ast.unparse(n) for n in ast.walk(_syntax(method)) if isinstance(n, ast.Attribute)}
    # _generate's return, unpacked and replayed field by field
    returns = [[ast.unparse(e) for e in node.value.elts] for node in ast.walk(_syntax(GRPOTrainer._generate))
               if isinstance(node, ast.Return) and isinstance(node.value, ast.Tuple)]
    assert returns == [["prompt_ids", "completion_ids", "tool_mask", "completions", "logprobs", "extra_fields",
                        "images", "tool_images"]], f"_generate now returns {returns}"
    assigned = {ast.unparse(n) for n in ast.walk(_syntax(GRPOTrainer.__init__)) if isinstance(n, ast.Attribute)}
    assert {"self._pending_extra_logs", "self._logs", "self.reward_weights", "self.num_generations"} <= assigned
    # and no field of ours shadows one of TRL's
    ours = {f.name for f in dataclasses.fields(PODSGRPOConfig)} - {f.name for f in dataclasses.fields(GRPOConfig)}
    assert ours == {"num_kept_generations", "selection_rule", "normalize_advantages_over", "completion_allocation",
                    "per_device_update_batch_size"}
