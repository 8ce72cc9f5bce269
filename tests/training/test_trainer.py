"""The training loop: selection shrinks the update, GA equals one big batch, CLI errors, learning."""
import json
import math

import pytest
import torch

from helpers import config
from pods import cli
from pods.runs import read_jsonl
from pods.training.rollout.hf import HFRolloutEngine
from pods.training.trainer import train
from pods.training.update import UpdateBatch
from pods.training.update.torch_engine import TorchUpdateEngine

torch.set_num_threads(1)
pytestmark = pytest.mark.usefixtures("toy_task")


def test_selection_shrinks_the_update_batch(base, tmp_path, monkeypatch):
    seen = {"step": [], "ref": []}
    original_step, original_ref = TorchUpdateEngine.step, TorchUpdateEngine.ref_logprobs

    def spy_step(self, batch, advantages, old_logprobs=None, ref_logprobs=None):
        seen["step"].append((len(batch), batch.num_tokens, len(advantages)))
        return original_step(self, batch, advantages, old_logprobs, ref_logprobs)

    def spy_ref(self, batch):
        seen["ref"].append(len(batch))
        return original_ref(self, batch)

    monkeypatch.setattr(TorchUpdateEngine, "step", spy_step)
    monkeypatch.setattr(TorchUpdateEngine, "ref_logprobs", spy_ref)
    cfg = config(base, tmp_path / "run", "n=16", "m=4", "max_steps=3", "beta=0.04")
    train(cfg, progress_bar=False)
    steps = read_jsonl(tmp_path / "run" / "steps.jsonl", finished=True)
    assert [s["step"] for s in steps] == [1, 2, 3]
    assert [(s["rollouts_generated"], s["rollouts_trained"]) for s in steps] == [(64, 16)] * 3
    # the update and the reference pass see m rollouts per prompt, and the logged count is theirs
    assert seen["step"] == [(16, s["tokens_trained"], 16) for s in steps]
    assert seen["ref"] == [16, 16, 16]
    assert all(s["tokens_trained"] < s["tokens_generated"] for s in steps)
    assert all(0 <= s["zero_variance_frac"] <= 1 and "kl" in s for s in steps)


def test_several_groups_per_prompt_are_selected_and_normalised_apart(base, tmp_path, monkeypatch):
    """rollouts_per_prompt = 2n: each prompt is sampled as two groups of n, each keeps its own m."""
    import pods.training.trainer

    prompts_seen, selected = [], []
    original_generate, original_select = HFRolloutEngine.generate, pods.training.trainer.select

    def spy_generate(self, prompt_ids, n, **kwargs):
        prompts_seen.append([tuple(p) for p in prompt_ids])
        return original_generate(self, prompt_ids, n, **kwargs)

    def spy_select(rewards, m, rule):
        selected.append(tuple(rewards.shape))
        return original_select(rewards, m, rule)

    monkeypatch.setattr(HFRolloutEngine, "generate", spy_generate)
    monkeypatch.setattr(pods.training.trainer, "select", spy_select)
    cfg = config(base, tmp_path / "run", "n=8", "m=4", "rollouts_per_prompt=16", "max_steps=2", "micro_batch=8")
    assert (cfg.groups_per_step, cfg.rollouts_generated, cfg.rollouts_trained, cfg.grad_accum) == (8, 64, 32, 4)
    train(cfg, progress_bar=False)
    steps = read_jsonl(tmp_path / "run" / "steps.jsonl", finished=True)
    assert [(s["rollouts_generated"], s["rollouts_trained"]) for s in steps] == [(64, 32)] * 2
    train_prompts = [p for p in prompts_seen if len(p) == 8]  # evaluation calls are larger
    assert len(train_prompts) == 2 and all(p[0::2] == p[1::2] for p in train_prompts)
    assert selected == [(8, 8)] * 2  # 8 groups of n = 8, not 4 groups of 16
    with pytest.raises(ValueError, match="rollouts_per_prompt"):
        config(base, tmp_path / "bad", "n=8", "m=4", "rollouts_per_prompt=12")


def test_no_reference_pass_when_beta_is_zero(base, tmp_path, monkeypatch):
    def fail(self, batch):
        raise AssertionError("reference log-probs computed with beta == 0")

    monkeypatch.setattr(TorchUpdateEngine, "ref_logprobs", fail)
    summary = train(config(base, tmp_path / "run", "n=8", "m=4", "max_steps=2"), progress_bar=False)
    assert summary["steps"] == 2 and summary["status"] == "complete"


@pytest.mark.filterwarnings(r"ignore:Seems like `optimizer.step\(\)` has been overridden")
@pytest.mark.parametrize("loss_agg", ["grpo", "bnpo", "dr_grpo"])
def test_gradient_accumulation_equals_one_big_batch(base, tmp_path, loss_agg):
    """GRPO-GA is the same step in more micro-batches: the accumulated gradient must agree."""
    from pods.training.models import load_policy
    from pods.training.rollout import make_rollout_engine
    from pods.training.rollout.base import encode_prompts

    model, tok = load_policy(base)
    torch.manual_seed(0)
    rollouts = make_rollout_engine("hf", model=model, tokenizer=tok, config=None).generate(
        encode_prompts(tok, ["ab?", "cdef?", "g?"]), 8, temperature=1.0, max_new_tokens=6
    )
    batch = UpdateBatch.from_rollouts(rollouts, torch.arange(24), tok.pad_token_id)
    advantages = torch.randn(24)
    grads, losses = [], []
    # in rollout order, then grouped by completion length (length_buckets): the same gradient
    for micro_batch, buckets in ((24, "false"), (5, "false"), (5, "true"), (24, "true")):
        cfg = config(base, tmp_path, "n=8", "m=8", f"micro_batch={micro_batch}", f"loss_agg={loss_agg}",
                     "max_steps=1", "max_grad_norm=0", f"length_buckets={buckets}")
        engine = TorchUpdateEngine(model=load_policy(base)[0], config=cfg)
        # keep the gradient the step accumulated (Adam's first step is ~lr * sign(g): too coarse to compare)
        engine.optimizer.step = engine.optimizer.zero_grad = lambda *a, **k: None
        losses.append(engine.step(batch, advantages)["loss"])
        grads.append(torch.cat([p.grad.flatten() for p in engine.policy.parameters()]))
    assert grads[0].abs().max() > 0
    for grad, loss in zip(grads[1:], losses[1:]):
        torch.testing.assert_close(grad, grads[0], atol=1e-7, rtol=1e-4)
        assert math.isclose(loss, losses[0], rel_tol=1e-5, abs_tol=1e-7)


def test_length_buckets_are_the_cheapest_split_of_the_sorted_rows():
    """Against brute force over every split of the rows sorted by length (within each run of
    micro_batch rows): every row once, no bucket over micro_batch, and the least padded positions plus
    pass costs."""
    import itertools

    from pods.training.update.torch_engine import length_buckets

    g = torch.Generator().manual_seed(0)
    for _ in range(150):
        rows, micro_batch = int(torch.randint(1, 12, (1,), generator=g)), int(torch.randint(1, 14, (1,), generator=g))
        lengths, pass_cost = torch.randint(1, 8, (rows,), generator=g), int(torch.randint(0, 12, (1,), generator=g))
        buckets = length_buckets(lengths, micro_batch, pass_cost)
        assert torch.equal(torch.cat(buckets).sort().values, torch.arange(rows))
        assert all(0 < len(b) <= micro_batch for b in buckets)
        cost = sum(len(b) * int(lengths[b].max()) + pass_cost for b in buckets)
        ordered, best = sorted(lengths.tolist()), 0
        for start in range(0, rows, micro_batch):
            run = ordered[start:start + micro_batch]
            best += min(
                sum((hi - lo) * run[hi - 1] + pass_cost for lo, hi in itertools.pairwise([0, *cuts, len(run)]))
                for k in range(len(run)) for cuts in itertools.combinations(range(1, len(run)), k)
            )
        assert cost == best, (lengths.tolist(), micro_batch, pass_cost)
    # all alike: one bucket per micro-batch; a long tail: split off when it pays
    assert [len(b) for b in length_buckets(torch.full((10,), 4), 4, 100)] == [4, 4, 2]
    assert [len(b) for b in length_buckets(torch.tensor([30] + [2] * 20), 64, 16)] == [20, 1]


@pytest.mark.parametrize(
    "args, message",
    [
        (["lrr=1e-4"], "unknown config key 'lrr'"),
        (["n=8", "m=16"], "config key 'm'"),
        (["benchmark=gsm9k"], "config key 'benchmark'"),
        (["base_model=/nonexistent/model"], "no model folder"),
    ],
)
def test_cli_config_errors_exit_nonzero_with_one_line(args, message, capsys, tmp_path):
    rc = cli.main(["train", f"run_dir={tmp_path}/run", *args])
    err = capsys.readouterr().err.strip()
    assert rc != 0 and message in err and len(err.splitlines()) == 1
    assert not (tmp_path / "run").exists()  # nothing was computed or written


@pytest.mark.slow
def test_short_run_learns_an_easy_task(base, tmp_path):
    cfg = config(base, tmp_path / "run", "n=8", "m=4", "max_steps=30", "eval_every_steps=10", "max_grad_norm=1.0")
    summary = train(cfg, progress_bar=False)
    evals = read_jsonl(tmp_path / "run" / "evals.jsonl", finished=True)
    assert [e["step"] for e in evals] == [0, 10, 20, 30]
    assert evals[0]["train_time_s"] == 0.0
    assert summary["final_accuracy"] >= summary["base_accuracy"] + 0.4, evals
    written = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert written == json.loads(json.dumps(summary))
    assert set(written["phase_s_per_step"]) == {"generate", "reward", "select", "logprob", "update"}
    steps = read_jsonl(tmp_path / "run" / "steps.jsonl", finished=True)
    times = [s["train_time_s"] for s in steps]
    assert times == sorted(times) and math.isclose(written["train_time_s"], times[-1], rel_tol=0.05, abs_tol=0.05)


# --- DAPO's dynamic sampling ---------------------------------------------------------------------
def fake_round(labels, n=4, flat=()):
    """A drawn round: one group per label; groups in `flat` get equal rewards, the others 0/1."""
    from pods.training.batches import Rollouts

    G = len(labels)
    rollouts = Rollouts([[i + 1] for i in range(G)], torch.arange(G * n)[:, None].repeat(1, 2 + len(labels[0]) % 2),
                        torch.ones(G * n, 2 + len(labels[0]) % 2, dtype=torch.long),
                        torch.arange(G).repeat_interleave(n), n)
    rewards = torch.tensor([[1.0] * n if g in flat else [0.0, 1.0] * (n // 2) for g in range(G)], dtype=torch.float64)
    return rollouts, rewards, list(labels)


def test_dynamic_sampling_drops_flat_groups_refills_and_stops_at_its_cap():
    from pods.training.groups import dynamic_sample

    draws = []

    def draw(k):  # k fresh prompts; the first refill's first prompt is flat
        labels = [f"r{len(draws) + 1}p{i}" for i in range(k)]
        draws.append(labels)
        return fake_round(labels, flat={0} if len(draws) == 1 else set())

    first = fake_round(["a", "b", "c", "d"], flat={1, 2})
    rollouts, rewards, problems, rounds = dynamic_sample(first, draw, need=4, per_prompt=1, max_rounds=5, pad_id=0)
    # b, c and r1p0 (flat) never come back; each refill asks for as many prompts as are missing
    assert problems == ["a", "d", "r1p1", "r2p0"] and rounds == 3 and draws == [["r1p0", "r1p1"], ["r2p0"]]
    assert rewards.shape == (4, 4) and bool((rewards.max(1).values > rewards.min(1).values).all())
    assert rollouts.completion_ids.shape[0] == 16 and rollouts.group.tolist() == [g for g in range(4) for _ in range(4)]
    assert rollouts.prompt_ids == [[1], [4], [2], [1]]
    # the rows of a kept group are that group's rows of its round, padded to the widest round
    assert rollouts.completion_ids[4:8, :2].tolist() == first[0].completion_ids[12:16, :2].tolist()
    # the cap: every round flat, so rounds stop at max_rounds and the step keeps the last round's
    draws.clear()
    all_flat = fake_round(["x", "y"], flat={0, 1})
    _, rewards, problems, rounds = dynamic_sample(all_flat, lambda k: fake_round([f"z{i}" for i in range(k)],
                                                                                 flat=set(range(k))),
                                                  need=2, per_prompt=1, max_rounds=3, pad_id=0)
    assert rounds == 3 and problems == ["z0", "z1"] and bool((rewards.max(1).values == rewards.min(1).values).all())
    # what it has when the cap comes first: the informative groups only
    _, _, problems, rounds = dynamic_sample(first, lambda k: fake_round(["w"] * k, flat=set(range(k))),
                                            need=4, per_prompt=1, max_rounds=2, pad_id=0)
    assert problems == ["a", "d"] and rounds == 2


def test_dynamic_sampling_in_the_loop_trains_only_informative_groups(base, tmp_path, monkeypatch):
    seen = []
    original_step = TorchUpdateEngine.step

    def spy_step(self, batch, advantages, old_logprobs=None, ref_logprobs=None):
        seen.append((len(batch), advantages.view(-1, 4).abs().sum(1).gt(0).all().item()))
        return original_step(self, batch, advantages, old_logprobs, ref_logprobs)

    monkeypatch.setattr(TorchUpdateEngine, "step", spy_step)
    cfg = config(base, tmp_path / "run", "n=8", "m=4", "rule=max_variance", "dynamic_sampling=true",
                 "max_generation_rounds=3", "max_steps=4")
    assert cfg.method == "dapo-max_variance-n8-m4"
    train(cfg, progress_bar=False)
    steps = read_jsonl(tmp_path / "run" / "steps.jsonl", finished=True)
    assert len(seen) == len(steps) == 4  # the spy saw every update: the checks below are not vacuous
    for record, (rows, informative) in zip(steps, seen):
        generated_groups = record["rollouts_generated"] // 8
        assert 1 <= record["generation_rounds"] <= 3
        assert record["groups_dropped"] == generated_groups - rows // 4
        assert record["rollouts_trained"] == rows <= 4 * 4
        if record["groups_dropped"] < generated_groups:  # something informative was found
            assert record["kept_zero_variance_frac"] == 0.0 and informative
        # a full step stopped refilling; a short one used every round
        assert rows == 16 or record["generation_rounds"] == 3
    assert any(r["generation_rounds"] > 1 for r in steps) or all(r["groups_dropped"] == 0 for r in steps)


@pytest.mark.slow
def test_speed_options_reproduce_the_default_runs_losses(base, tmp_path):
    """compile_update (inductor-fused MLPs in the update) and hf_static rollouts (static cache, compiled
    decoding) change the numbers in the last bits only: a short run logs the default's losses to tolerance."""
    runs = {}
    for name, extra in {"default": [], "compiled": ["compile_update=true", "rollout_engine=hf_static"]}.items():
        train(config(base, tmp_path / name, "n=8", "m=4", "max_steps=3", *extra), progress_bar=False)
        runs[name] = read_jsonl(tmp_path / name / "steps.jsonl", finished=True)
    for default, compiled in zip(runs["default"], runs["compiled"], strict=True):
        assert compiled["tokens_generated"] == default["tokens_generated"]
        for key in ("loss", "grad_norm", "reward_mean"):
            assert compiled[key] == pytest.approx(default[key], rel=1e-4, abs=1e-6), key


def test_a_hardware_name_without_a_profile_is_refused_and_the_profile_comes_from_hardware_dir(base, tmp_path, capsys,
                                                                                            monkeypatch):
    profiles = tmp_path / "hardware"
    profiles.mkdir()
    (profiles / "box.yaml").write_text("train: {device: cpu}\nnote: our own profile\n")
    assert cli.main(["train", f"base_model={base}", f"run_dir={tmp_path / 'tpu'}", "hardware=tpu-v9"]) == 2
    err = capsys.readouterr().err
    assert "config key 'hardware': no profile config/hardware/tpu-v9.yaml (profiles there: " in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "tpu").exists()
    import pods.training.rundir

    recorded = {}
    real_tracker = pods.training.rundir.Tracker

    def tracker(*args, metadata, **kwargs):  # the run's metadata, as the live trackers get it
        recorded.update(metadata)
        return real_tracker(*args, metadata=metadata, **kwargs)

    monkeypatch.setattr(pods.training.rundir, "Tracker", tracker)
    train(config(base, tmp_path / "run", "n=4", "m=2", "max_steps=1", "hardware=box", f"hardware_dir={profiles}"),
          progress_bar=False)
    assert recorded["hardware"] == {"train": {"device": "cpu"}, "note": "our own profile"}


def test_a_path_template_and_the_path_it_names_are_not_a_difference(tmp_path):
    from pods.training.config import load_train_config
    from pods.training.rundir import saved_config_differences

    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("benchmark: arith\nbase_model: models/arith/base\nlr: 0.001\n")
    cfg = load_train_config(None, ["benchmark=arith", f"run_dir={run}",
                                   "lr=0.002"])  # base_model: models/{benchmark}/base
    assert saved_config_differences(cfg, run) == ["lr=0.001, not 0.002"]


@pytest.mark.parametrize("value, loaded", [("auto", "eager"), ("sdpa", "sdpa")])
def test_the_policy_runs_the_configs_attention_in_rollouts_and_update(base, tmp_path, value, loaded):
    from pods.training.trainer import build_parts

    parts = build_parts(config(base, tmp_path, f"attn_implementation={value}", "max_steps=1"))
    assert parts.updater.policy.config._attn_implementation == loaded
    assert parts.sampler.model is parts.updater.policy
