"""Warm start: reproducible by seed, learns, writes a loadable folder, rejects bad config early."""
import itertools
import json

import pytest
import torch

from pods.cli import main
from pods.training.models import load_policy
from pods.training.warmstart import pass_at_k, warmstart
from pods.training.warmstart_config import TUNED, WarmStartConfig
from pods.training.warmstart_config import load_warmstart_config as load_config

TINY = dict(n_layer=2, d_model=32, n_head=2, batch_size=16, warmup_steps=2, eval_items=40,
            pass_items=8, pass_samples=4, eval_batch=64)


def test_pass_at_k_matches_brute_force():
    for n, c, k in [(4, 0, 1), (4, 1, 2), (6, 2, 3), (6, 5, 4), (5, 5, 5), (8, 3, 8)]:
        outcomes = [True] * c + [False] * (n - c)
        subsets = list(itertools.combinations(outcomes, k))
        assert pass_at_k(n, c, k) == pytest.approx(sum(any(s) for s in subsets) / len(subsets))


def test_same_seed_same_model_and_record(tmp_path):
    records, logits = [], []
    for name in ["a", "b"]:
        cfg = WarmStartConfig(**TINY, steps=6, seed=1, out_dir=str(tmp_path / name))
        records.append(warmstart(cfg, progress=False))
        model, tok = load_policy(tmp_path / name)
        logits.append(model(torch.tensor([tok("4+7-8=")["input_ids"]])).logits)
    assert torch.equal(logits[0], logits[1])
    for key in ["final_loss", "greedy_accuracy", "pass_at_k", "greedy_mean_length"]:
        assert records[0][key] == records[1][key]
    saved = json.loads((tmp_path / "a" / "warmstart.json").read_text())
    assert saved["greedy_items"] == 40 and set(saved["pass_at_k"]) == {"1", "2", "4"}
    assert saved["config"]["seed"] == 1 and saved["steps"] == 6


def test_more_supervised_steps_lower_the_loss(tmp_path):
    short = warmstart(WarmStartConfig(**TINY, steps=5, error_rate=0.0, out_dir=str(tmp_path / "s")), progress=False)
    longer = warmstart(WarmStartConfig(**TINY, steps=120, lr=3e-3, error_rate=0.0, out_dir=str(tmp_path / "l")),
                       progress=False)
    assert longer["final_loss"] < 0.6 * short["final_loss"]
    # the format is learned long before the arithmetic: completions end with an answer mark
    model, tok = load_policy(tmp_path / "l")
    out = model.generate(**tok(["4+7-8="], return_tensors="pt"), max_new_tokens=12, do_sample=False,
                         pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    assert "#" in tok.decode(out[0, 7:], skip_special_tokens=True)


def test_rewriting_an_existing_folder_replaces_it_whole(tmp_path):
    out = tmp_path / "base"
    warmstart(WarmStartConfig(**TINY, steps=2, out_dir=str(out)), progress=False)
    (out / "stale.txt").write_text("left over")
    warmstart(WarmStartConfig(**TINY, steps=3, out_dir=str(out)), progress=False)
    assert not (out / "stale.txt").exists()
    assert json.loads((out / "warmstart.json").read_text())["steps"] == 3
    assert [p.name for p in tmp_path.iterdir()] == ["base"]  # no temp folders left behind


def test_config_file_and_overrides(tmp_path):
    path = tmp_path / "ws.yaml"
    path.write_text("benchmark: arith_hard\nsteps: 7\nlr: 1\n")
    cfg = load_config(str(path), ["seed=3", "error_rate=0.1"])
    assert (cfg.benchmark, cfg.steps, cfg.lr, cfg.seed, cfg.error_rate) == ("arith_hard", 7, 1.0, 3, 0.1)
    # unset length and schedule come from the benchmark's tuned values
    for name in TUNED:
        cfg = load_config(None, [f"benchmark={name}"])
        assert (cfg.steps, cfg.lr_schedule) == (TUNED[name]["steps"], TUNED[name]["lr_schedule"])


def test_numbers_are_read_as_the_trainer_reads_them():
    # YAML 1.1 (PyYAML) reads `1e-3` as a string; both configs take it as the float it is
    assert load_config(None, ["lr=1e-3"]).lr == 1e-3
    from pods.training.config import load_train_config

    assert load_train_config(None, ["lr=1e-3"]).lr == 1e-3


@pytest.mark.parametrize("args, message", [
    (["stepz=3"], "unknown warmstart key 'stepz' in overrides (did you mean 'steps'?)"),
    (["benchmark=gsm9k"], "unknown 'gsm9k'"),
    (["steps=ten"], "warmstart key 'steps' must be int or null, got 'ten'"),
    (["error_rate=1.5"], "error_rate"),
    (["--config", "/nonexistent.yaml"], "does not exist"),
])
def test_bad_input_is_one_clear_line_and_nonzero_exit(capsys, tmp_path, args, message):
    assert main(["warmstart", *args, f"out_dir={tmp_path / 'never'}"]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert not (tmp_path / "never").exists()


# The outcome of a small deterministic warm start of the default shape, pinned: a change to the
# task's data, the tokenizer, the model code or its initialisation (a new transformers version
# included) that alters what `pods warmstart` builds fails here, and then the committed runs no
# longer start from what the shipped code builds and must be regenerated (docs/embedded-default.md).
# The initial weights and the data are bit-exact on any CPU (float64 draws, pure-Python streams);
# 20 steps of training agree to about 1e-6 across kernel paths, hence the tolerance on the loss.
PINNED = {
    "initial_weights_sha256": "79b3b6e814ee68be130ce0545624b5e06f784a79573e388aec08fd80b2144846",
    "first_batch_sha256": "2a4dcabf174d793ef80f15d0019368ae086c854697eaf5d92ae2689ca97fbb30",
    "final_loss": 2.6409263610839844,  # after 20 steps
    "greedy_mean_length": 12.16,       # on the first 100 test items
}


@pytest.mark.slow
def test_the_default_warm_start_is_pinned(tmp_path):
    import hashlib
    import random

    from pods.training.models import build_char_tokenizer, build_tiny_policy
    from pods.training.tasks import get_task
    from pods.training.warmstart import make_batch

    torch.set_num_threads(1)
    cfg = WarmStartConfig(benchmark="arith", steps=20, eval_items=100, pass_items=4, pass_samples=2,
                          out_dir=str(tmp_path / "base"))
    cfg.validate()
    tok = build_char_tokenizer()
    model = build_tiny_policy(tok, arch=cfg.arch, n_layer=cfg.n_layer, d_model=cfg.d_model, n_head=cfg.n_head,
                              max_len=cfg.max_len, seed=cfg.seed)
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.contiguous().numpy().tobytes())
    assert digest.hexdigest() == PINNED["initial_weights_sha256"]
    task, rng = get_task("arith"), random.Random(cfg.seed)
    ids, _, labels = make_batch(task, rng.sample(task.train_problems(cfg.seed), cfg.batch_size), tok, rng,
                                cfg.error_rate)
    assert hashlib.sha256(ids.numpy().tobytes() + labels.numpy().tobytes()).hexdigest() == PINNED["first_batch_sha256"]
    record = warmstart(cfg, progress=False)
    assert record["final_loss"] == pytest.approx(PINNED["final_loss"], rel=1e-3)
    assert record["greedy_mean_length"] == pytest.approx(PINNED["greedy_mean_length"], abs=0.3)


def test_the_warm_starts_code_inputs_are_every_module_it_imports(tmp_path):
    """The workflow rebuilds a base when any file of code_files() changes: every module of the
    package that `pods warmstart` loads must be among them (a hand-kept list missed some)."""
    import subprocess
    import sys
    from pathlib import Path

    from pods.training.warmstart_config import code_files

    repo = Path(__file__).resolve().parents[2]
    files = set(code_files())
    assert {repo / "pods/training/config.py", repo / "pods/training/warmstart.py", repo / "pods/cli.py"} <= files
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, pods.cli, pods.training.warmstart_cli, pods.training.warmstart\n"
         "print('\\n'.join(m.__file__ for n, m in list(sys.modules.items()) if n.split('.')[0] == 'pods'))"],
        env={**__import__("os").environ, "PYTHONPATH": str(repo)}, cwd=tmp_path, capture_output=True, text=True,
        check=True)
    missing = {Path(line) for line in loaded.stdout.split()} - files
    assert not missing, f"imported by the warm start but not among its code inputs: {sorted(map(str, missing))}"


def test_a_base_is_compared_with_the_studys_recipe_and_cpu_kernels():
    from dataclasses import asdict

    from pods.training.warmstart_config import base_differences, warmstart_command

    expected = load_config(None, ["benchmark=arith", "out_dir=models/arith/base"])
    record = {"config": {**asdict(expected), "out_dir": "models/{benchmark}/base"},
              "environment": {"cpu_capability": "AVX2"}}
    assert base_differences(record, expected, "avx2") == []
    record["config"]["steps"] = 600
    record["environment"]["cpu_capability"] = "AVX512"
    assert base_differences(record, expected, "avx2") == ["steps=600, not 500", "CPU kernels AVX512, not AVX2"]
    assert base_differences(record, expected, None) == ["steps=600, not 500"]  # no pin: torch's own choice
    assert (warmstart_command(["benchmark=arith", "out_dir=models/arith/base"])
            == "ATEN_CPU_CAPABILITY=avx2 pods warmstart benchmark=arith out_dir=models/arith/base")


def _pods(args, tmp_path, **env):
    import os
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    environ = {k: v for k, v in os.environ.items() if k != "ATEN_CPU_CAPABILITY"}
    return subprocess.run([sys.executable, "-m", "pods.cli", *args], cwd=tmp_path, capture_output=True, text=True,
                          env={**environ, "PYTHONPATH": str(repo), "HF_HUB_OFFLINE": "1", **env})


def test_pods_warmstart_by_hand_builds_on_the_workflows_cpu_kernels_unless_told_otherwise(tmp_path):
    tiny = [f"{k}={v}" for k, v in TINY.items()] + ["steps=2"]
    result = _pods(["warmstart", "--no-progress", *tiny, f"out_dir={tmp_path / 'pinned'}"], tmp_path)
    assert result.returncode == 0, result.stderr
    assert json.loads((tmp_path / "pinned/warmstart.json").read_text())["environment"]["cpu_capability"] == "AVX2"
    result = _pods(["warmstart", "--no-progress", *tiny, f"out_dir={tmp_path / 'default'}"], tmp_path,
                   ATEN_CPU_CAPABILITY="default")
    assert result.returncode == 0, result.stderr
    assert json.loads((tmp_path / "default/warmstart.json").read_text())["environment"]["cpu_capability"] == "DEFAULT"


def test_pods_warmstart_help_loads_no_model_library(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    code = ("import sys\nfrom pods.cli import main\ntry:\n    main(['warmstart', '--help'])\nexcept SystemExit:\n    "
            "pass\n"
            "print('loaded:', sorted(m for m in ('torch', 'transformers', 'bitsandbytes') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                            env={**__import__("os").environ, "PYTHONPATH": str(repo)})
    assert "ATEN_CPU_CAPABILITY" in result.stdout and "loaded: []" in result.stdout, result.stdout + result.stderr


def test_a_missing_base_names_the_command_that_builds_it(tmp_path, monkeypatch):
    from pods.training.config import load_train_config
    from pods.training.trainer import check_base_model

    cfg = load_train_config(None, [f"base_model={tmp_path / 'base'}", f"run_dir={tmp_path / 'run'}"])
    with pytest.raises(FileNotFoundError) as refused:
        check_base_model(cfg, build=True)  # a folder of the user's own is never built unasked
    assert str(refused.value) == (f"base_model: no model folder at {tmp_path / 'base'} (the folder does not exist); "
                                  f"check the path, or build a base there as the workflow does: "
                                  f"ATEN_CPU_CAPABILITY=avx2 pods warmstart benchmark=arith "
                                  f"out_dir={tmp_path / 'base'}")
    (tmp_path / "base").mkdir()
    with pytest.raises(FileNotFoundError, match=r"base is not a model folder \(it has no config.json\); check"):
        check_base_model(cfg)
    monkeypatch.chdir(tmp_path)  # the default base, not built when the caller does not ask for it
    with pytest.raises(FileNotFoundError) as refused:
        check_base_model(load_train_config(None, ["benchmark=arith_hard"]))
    assert str(refused.value) == ("base_model: no model folder at models/arith_hard/base (the folder does not "
                                  "exist); build it as the workflow does: ATEN_CPU_CAPABILITY=avx2 pods warmstart "
                                  "benchmark=arith_hard out_dir=models/arith_hard/base")
