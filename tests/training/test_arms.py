"""The field's arms beside PODS (docs/field.md): CPPO's pruning and allocation against brute force,
GRESO's pre-rollout filter against hand-computed skip probabilities, its histories through a
checkpoint, and the existing arms' configs as the committed runs recorded them."""
import json
from itertools import combinations
from pathlib import Path

import pytest
import torch
import yaml

from helpers import config
from pods.grpo import kept_advantages
from pods.runs import read_jsonl, read_run
from pods.training.config import load_train_config, variant_settings
from pods.training.groups import PromptFilter, PromptStream
from pods.training.trainer import train
from pods.training.update.torch_engine import TorchUpdateEngine
from pods.vocabulary import RUN_LAYOUT, parse_method, parse_run_path

torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parents[2]
NEW_KEYS = ("completion_allocation", "pre_rollout_filter", "filter_p_easy", "filter_p_hard",
            "filter_target_zero_variance", "filter_p_step", "filter_p_min", "filter_p_max", "filter_keep_floor",
            "filter_correct_reward")


# --- the existing arms ---------------------------------------------------------------------------
def committed_configs() -> list[Path]:
    """One committed run config of every (study, benchmark, method)."""
    found = {}
    for path in sorted(ROOT.glob("results/**/runs/*/*/*/seed*/config.yaml")):
        key = (path.parents[5], *path.parts[-5:-2])
        found.setdefault(key, path)
    return list(found.values())


def test_existing_methods_resolve_to_the_config_their_committed_runs_recorded(monkeypatch):
    """Every key a committed run recorded reads back to the same value, the new keys are off, the
    method name is the run's, and the step sizes are the ones its steps.jsonl logged: the new code
    paths are not taken by any existing arm."""
    monkeypatch.chdir(ROOT)  # the recorded hardware_dir is relative to the checkout
    paths = [path for path in committed_configs()
             if not parse_method(parse_run_path(path.parent)["method"]).variant]   # CPPO and GRESO: below
    methods = {parse_run_path(path.parent)["method"] for path in paths}
    assert {"grpo-n16-m16", "grpo-n64-m64", "pods-max_variance-n64-m16", "dapo-n16-m16",
            "dapo-max_variance-n64-m16", "pods-max_reward-n64-m16", "pods-random-n64-m16"} <= methods
    for path in paths:
        saved = yaml.safe_load(path.read_text())
        cfg = load_train_config(path)
        name = parse_run_path(path.parent)["method"]
        assert variant_settings(parse_method(name)) == {}
        assert cfg.method == name and cfg.variant == ""
        now = cfg.to_dict()
        assert {key: now[key] for key in saved} == saved, path
        assert not cfg.completion_allocation and not cfg.pre_rollout_filter
        assert cfg.prompts_drawn == saved["prompts_per_step"]
        assert (cfg.groups_per_step, cfg.rollouts_trained) == (saved["prompts_per_step"],
                                                               saved["prompts_per_step"] * saved["m"])
        first = read_jsonl(path.parent / "steps.jsonl", finished=True)[0]
        assert "prompts_skipped" not in first
        if not cfg.dynamic_sampling:  # DAPO's counts vary with its refills
            assert (first["rollouts_generated"], first["rollouts_trained"]) == (cfg.rollouts_generated,
                                                                                cfg.rollouts_trained)



def test_the_committed_cppo_and_greso_runs_resolve_to_the_config_they_recorded(monkeypatch):
    """The field study's CPPO and GRESO runs: every recorded key reads back, the name sets what its
    method is (CPPO's allocation and normalisation over all n, GRESO's filter behind DAPO's sampling),
    and the first logged step has the sizes the config gives (CPPO: n / k times the prompts)."""
    monkeypatch.chdir(ROOT)
    paths = [path for path in committed_configs()
             if parse_method(parse_run_path(path.parent)["method"]).variant]
    assert {parse_method(parse_run_path(path.parent)["method"]).variant for path in paths} == {"cppo", "greso"}
    for path in paths:
        saved = yaml.safe_load(path.read_text())
        cfg = load_train_config(path)
        now = cfg.to_dict()
        assert {key: now[key] for key in saved} == saved, path
        first = read_jsonl(path.parent / "steps.jsonl", finished=True)[0]
        if cfg.variant == "cppo":
            assert cfg.completion_allocation and cfg.normalize_over == "all" and not cfg.pre_rollout_filter
            assert cfg.prompts_drawn == saved["prompts_per_step"] * saved["n"] // saved["m"]
            assert (first["rollouts_generated"], first["rollouts_trained"]) == (cfg.prompts_drawn * saved["n"],
                                                                                saved["prompts_per_step"] * saved["n"])
        else:
            assert cfg.pre_rollout_filter and cfg.dynamic_sampling and not cfg.completion_allocation
            assert "prompts_skipped" in first

# --- CPPO ------------------------------------------------------------------------------------------
def cppo_brute_force(rewards: torch.Tensor, k: int) -> list[list[int]]:
    """Per group, CPPO's own definition read literally: advantages over all n ((r - mean) / (std + 1e-4),
    torch's unbiased std as in its code); of every k-subset, those whose kept |advantage| are each at
    least every pruned one; the one with the lowest indices among them."""
    out = []
    for row in rewards:
        advantage = ((row - row.mean()) / (row.std() + 1e-4)).abs().tolist()
        n = len(advantage)
        top = [s for s in combinations(range(n), k)
               if min(advantage[i] for i in s) >= max([advantage[i] for i in range(n) if i not in s], default=0)]
        out.append(list(min(top)))
    return out


def test_cppo_keeps_the_largest_abs_advantages_of_each_group_as_brute_force_does():
    from pods.selection import select

    generator = torch.Generator().manual_seed(0)
    for n, k in [(8, 2), (8, 4), (6, 3), (16, 4)]:
        rewards = torch.randint(0, 4, (40, n), generator=generator).double() / 4  # ties and flat groups
        rewards[0] = 0.5  # a flat group: every |advantage| is 0
        assert select(rewards, k, "max_abs_advantage").tolist() == cppo_brute_force(rewards, k)


def test_cppo_in_the_loop_draws_n_over_k_times_the_prompts_and_keeps_the_update_size(base, tmp_path, monkeypatch,
                                                                                     toy_task):
    """cppo-n8-m2 at prompts_per_step 4: each step draws 16 prompts (4 x 8 / 2) of the stream, generates
    8 for each (128), trains the 2 of each with the largest |advantage| (32 rows: GRPO n = 8's update)
    with advantages over all 8."""
    import pods.training.trainer

    drawn, selected, updates = [], [], []
    original_take, original_select, original_step = (PromptStream.take, pods.training.trainer.select,
                                                     TorchUpdateEngine.step)

    def spy_take(self, k):
        drawn.append((self.position, k))
        return original_take(self, k)

    def spy_select(rewards, m, rule):
        kept = original_select(rewards, m, rule)
        selected.append((rewards.clone(), kept.clone(), rule))
        return kept

    def spy_step(self, batch, advantages, old_logprobs=None, ref_logprobs=None):
        updates.append((len(batch), advantages.clone()))
        return original_step(self, batch, advantages, old_logprobs, ref_logprobs)

    monkeypatch.setattr(PromptStream, "take", spy_take)
    monkeypatch.setattr(pods.training.trainer, "select", spy_select)
    monkeypatch.setattr(TorchUpdateEngine, "step", spy_step)
    cfg = config(base, tmp_path / RUN_LAYOUT, "n=8", "m=2", "rule=max_abs_advantage", "completion_allocation=true",
                 "normalize_over=all", "max_steps=3")
    assert cfg.method == "cppo-n8-m2"
    assert (cfg.prompts_drawn, cfg.rollouts_generated, cfg.rollouts_trained) == (16, 128, 32)
    train(cfg, progress_bar=False)
    assert read_run(cfg.output_dir()).summary["method"] == "cppo-n8-m2"  # the run files read back, checked
    steps = read_jsonl(cfg.output_dir() / "steps.jsonl", finished=True)
    assert [(s["rollouts_generated"], s["rollouts_trained"]) for s in steps] == [(128, 32)] * 3
    assert drawn == [(0, 16), (16, 16), (32, 16)]  # 16 fresh prompts of the stream a step
    assert len(selected) == len(updates) == 3
    for (rewards, kept, rule), (rows, advantages) in zip(selected, updates):
        assert rule == "max_abs_advantage" and rewards.shape == (16, 8) and rows == 32 == 4 * 8
        assert kept.tolist() == cppo_brute_force(rewards, 2)
        torch.testing.assert_close(advantages, kept_advantages(rewards, kept, normalize_over="all").flatten().float())


@pytest.mark.parametrize(("overrides", "message"), [
    (["rule=max_variance"], "completion_allocation"),
    (["normalize_over=kept"], "normalize_over"),
    (["m=3"], "multiple of m"),
    (["dynamic_sampling=true"], "completion_allocation"),
    (["rollouts_per_prompt=16"], "rollouts_per_prompt"),
])
def test_cppo_config_errors_name_the_key(overrides, message):
    settings = ["n=8", "m=2", "rule=max_abs_advantage", "completion_allocation=true", "normalize_over=all",
                "prompts_per_step=1", "max_steps=1"]
    with pytest.raises(ValueError, match=message):
        load_train_config(None, [*settings, *overrides])


# --- GRESO -----------------------------------------------------------------------------------------
def make_filter(size=6, seed=0, **overrides):
    settings = dict(p_easy=0.5, p_hard=0.3, target_zero_variance=0.25, p_step=0.01, p_min=0.05, p_max=0.95,
                    keep_floor=0.01, correct_reward=1.0)
    return PromptFilter(size, seed, **{**settings, **overrides})


def test_greso_skip_probabilities_are_one_minus_p_to_the_streak_above_the_exploration_floor():
    f = make_filter()
    f.streak[:] = [0, 1, 3, -1, -2, 9]  # never flat; 1 and 3 groups all correct; 1, 2 all wrong; 9 all correct
    by_hand = [0.0, 1 - 0.5, 1 - 0.125, 1 - 0.3, 1 - 0.09, 1 - 0.01]  # the last: 0.5 ** 9 < the floor 0.01
    assert [f.skip_probability(i) for i in range(6)] == pytest.approx(by_hand, abs=1e-15)


def test_greso_histories_count_the_latest_all_correct_or_all_wrong_groups():
    f = make_filter(size=4)
    f.streak[:] = [3, 3, -2, -2]
    f._pending = [0, 1, 2, 3]
    f.record(torch.tensor([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.5, 0.0]]))
    # all correct again: 4; all wrong after correct: -1; mixed: 0; all wrong (0.5 is below 1): -3
    assert f.streak.tolist() == [4, -1, 0, -3]
    assert (f.easy, f.hard, f.groups) == (1, 2, 4)
    with pytest.raises(ValueError, match="prompts last taken"):
        f.record(torch.zeros(2, 3))


def test_greso_adapts_its_base_probabilities_after_the_first_epoch_within_bounds():
    f = make_filter(size=4, p_easy=0.5, p_hard=0.05)
    f.easy, f.hard, f.groups, f.skipped = 1, 0, 4, 3  # easy share 0.25 >= 0.25 / 3, hard share 0 < 0.25 * 2 / 3
    assert f.end_step(epoch=0) == {"prompts_skipped": 3, "filter_p_easy": 0.5, "filter_p_hard": 0.05}  # epoch 0
    assert (f.easy, f.hard, f.groups, f.skipped) == (0, 0, 0, 0)
    f.easy, f.hard, f.groups = 1, 0, 4
    record = f.end_step(epoch=1)
    assert record["filter_p_easy"] == pytest.approx(0.49) and record["filter_p_hard"] == pytest.approx(0.06)
    f.p_easy, f.easy, f.hard, f.groups = 0.05, 4, 4, 4  # at the bounds: p_min holds
    f.p_hard = 0.05
    record = f.end_step(epoch=3)
    assert record["filter_p_easy"] == 0.05 and record["filter_p_hard"] == 0.05
    f.p_hard, f.groups = 0.95, 4  # nothing all wrong: p_hard rises, but not above p_max
    assert f.end_step(epoch=3)["filter_p_hard"] == 0.95


def test_greso_take_skips_at_its_probability_consumes_the_skipped_and_keeps_the_floor():
    stream = PromptStream(list(range(50)), seed=0)
    f = make_filter(size=50, p_easy=0.5)
    f.streak[:] = 1  # every prompt: skip probability 0.5
    kept = f.take(stream, 2000)
    assert len(kept) == 2000 and stream.position == 2000 + f.skipped
    assert 0.47 < f.skipped / stream.position < 0.53
    # the same seed makes the same decisions at the same stream positions; another seed others
    again, other = make_filter(size=50, p_easy=0.5), make_filter(size=50, seed=1, p_easy=0.5)
    again.streak[:] = other.streak[:] = 1
    assert again.take(PromptStream(list(range(50)), seed=0), 2000) == kept
    assert other.take(PromptStream(list(range(50)), seed=0), 2000) != kept
    # the exploration floor: 0.5 ** 40 is far below 0.01, and still one prompt in a hundred is generated
    floor = make_filter(size=50, p_easy=0.5)
    floor.streak[:] = 40
    stream = PromptStream(list(range(50)), seed=0)
    floor.take(stream, 40)
    assert 0.006 < 40 / stream.position < 0.016
    # prompts without history are never skipped
    fresh = make_filter(size=50)
    stream = PromptStream(list(range(50)), seed=0)
    assert fresh.take(stream, 30) == PromptStream(list(range(50)), seed=0).take(30) and fresh.skipped == 0


GRESO = ["n=8", "m=8", "dynamic_sampling=true", "pre_rollout_filter=true", "prompts_per_step=8",
         "max_generation_rounds=2", "checkpoint_every_s=0", "eval_every_steps=4"]
GRESO_KEYS = ("rollouts_generated", "rollouts_trained", "tokens_generated", "tokens_trained", "reward_mean",
              "zero_variance_frac", "loss", "grad_norm", "generation_rounds", "groups_dropped", "prompts_skipped",
              "filter_p_easy", "filter_p_hard")


def test_greso_in_the_loop_skips_recurring_flat_prompts_and_resumes_exactly(base, tmp_path, toy_task):
    """The toy task's 64 prompts recur every few steps, so the filter acts; a run stopped at step 5 and
    resumed from its checkpoint logs what the straight run logs, histories and probabilities included."""
    straight = config(base, tmp_path / "straight", *GRESO, "max_steps=14")
    assert straight.method == "greso-n8-m8"
    train(straight, progress_bar=False)
    checked = config(base, tmp_path / RUN_LAYOUT, *GRESO, "max_steps=2")
    train(checked, progress_bar=False)
    assert read_run(checked.output_dir()).summary["method"] == "greso-n8-m8"  # the run files read back, checked
    train(config(base, tmp_path / "resumed", *GRESO, "max_steps=5"), progress_bar=False)
    state = json.loads((tmp_path / "resumed" / "checkpoint" / "state.json").read_text())
    histories = state["state"]["progress"]["prompt_filter"]
    assert len(histories["streak_index"]) == len(histories["streak"]) > 0
    train(config(base, tmp_path / "resumed", *GRESO, "max_steps=14"), progress_bar=False)

    def pick(run):
        return [{k: r[k] for k in GRESO_KEYS} for r in read_jsonl(tmp_path / run / "steps.jsonl", finished=True)]

    steps = pick("straight")
    assert len(steps) == 14 and pick("resumed") == steps
    assert sum(s["prompts_skipped"] for s in steps) > 0  # prompts came back with a flat history and were skipped
    assert steps[0]["prompts_skipped"] == 0  # nothing has a history yet
    assert any(s["filter_p_hard"] != 0.5 for s in steps)  # past the first epoch the probabilities adapt
    def evals(run):
        return [(r["step"], r["accuracy"]) for r in read_jsonl(tmp_path / run / "evals.jsonl", finished=True)]

    assert [e for e in evals("resumed") if e[0] != 5] == evals("straight")  # less the first budget's last


def test_greso_trains_as_dapo_while_no_prompt_has_come_back(base, tmp_path, toy_task):
    """The filter only acts on prompts generated before: within the first pass over the toy's 64
    prompts (3 steps of at most 2 rounds of 8) GRESO logs DAPO's steps and evaluations exactly, as
    on the embedded tasks, where no run comes back to a prompt (docs/field.md)."""
    common = [o for o in GRESO if not o.startswith("pre_rollout_filter")] + ["max_steps=3"]
    train(config(base, tmp_path / "greso", *common, "pre_rollout_filter=true"), progress_bar=False)
    train(config(base, tmp_path / "dapo", *common), progress_bar=False)
    keys = [k for k in GRESO_KEYS if k not in ("prompts_skipped", "filter_p_easy", "filter_p_hard")]

    def pick(run, name):
        return [{k: r.get(k) for k in keys} for r in read_jsonl(tmp_path / run / name, finished=True)]

    greso = read_jsonl(tmp_path / "greso" / "steps.jsonl", finished=True)
    assert len(greso) == 3 and sum(r["prompts_skipped"] for r in greso) == 0
    assert pick("greso", "steps.jsonl") == pick("dapo", "steps.jsonl")
    def evals(run):  # what was evaluated and scored; the seconds it took are the machine's
        return [(r["step"], r["accuracy"], r["mean_length"]) for r in read_jsonl(tmp_path / run / "evals.jsonl",
                                                                                 finished=True)]

    assert evals("greso") == evals("dapo")


def test_a_run_without_the_filter_saves_no_filter_state(base, tmp_path, toy_task):
    train(config(base, tmp_path / "run", "n=8", "m=4", "dynamic_sampling=true", "max_steps=1",
                 "checkpoint_every_s=0"), progress_bar=False)
    state = json.loads((tmp_path / "run" / "checkpoint" / "state.json").read_text())
    assert "prompt_filter" not in state["state"]["progress"]


@pytest.mark.parametrize(("overrides", "message"), [
    (["dynamic_sampling=false"], "needs dynamic_sampling"),
    (["filter_p_easy=1.5"], "filter_p_easy"),
    (["filter_keep_floor=0"], "filter_keep_floor"),
    (["filter_p_min=0.9", "filter_p_max=0.5"], "filter_p_min"),
])
def test_greso_config_errors_name_the_key(overrides, message):
    settings = ["n=8", "m=8", "dynamic_sampling=true", "pre_rollout_filter=true", "max_steps=1"]
    with pytest.raises(ValueError, match=message):
        load_train_config(None, [*settings, *overrides])
