"""Hub ids: fetched once into a folder that records its commit, resolved offline from the cache,
refused in one line when the cache lacks them (a study's fetch jobs: tests/study/test_study.py)."""
from __future__ import annotations

import json

import pytest

import hub_cache
from pods.cli import main as pods_main
from pods.training import hub

QWEN = "Qwen/Qwen2.5-3B-Instruct"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    from huggingface_hub import constants

    root = tmp_path / "cache"
    hub_cache.tiny_model(hub_cache._repo(root, QWEN, "model", None), "qwen2")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(root))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    hub.resolve.cache_clear()
    yield root
    hub.resolve.cache_clear()


def test_fetch_lays_out_the_snapshot_and_records_the_commit(cache, tmp_path, capsys):
    out = tmp_path / "models/hub/models" / QWEN
    assert pods_main(["fetch", QWEN, "--out", str(out)]) == 0
    commit = hub_cache._commit(QWEN)
    assert json.loads((out / "hub.json").read_text()) == {"hub_id": QWEN, "repo_type": "model", "revision": "main",
                                                          "commit": commit}
    assert (out / "config.json").is_symlink() and (out / "model.safetensors").resolve().is_file()
    assert hub.hub_origin(out)["commit"] == commit == hub.hub_origin(hub.resolve(QWEN))["commit"]
    assert f"{QWEN} at {commit}" in capsys.readouterr().out


def test_an_id_the_offline_cache_lacks_is_refused_in_one_line_naming_the_fetch(cache, tmp_path, capsys):
    assert pods_main(["fetch", "meta-llama/Llama-3.2-3B-Instruct", "--revision", "abc"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("pods fetch: error: model meta-llama/Llama-3.2-3B-Instruct@abc is not in the local hub cache and "
                   "the hub is offline (HF_HUB_OFFLINE=1); fetch it where the hub is reachable: pods fetch "
                   "meta-llama/Llama-3.2-3B-Instruct --revision abc")
    assert pods_main(["train", "benchmark=gsm8k", "base_model=Qwen/Qwen2.5-7B-Instruct", "max_steps=1",
                      f"run_dir={tmp_path / 'run'}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "base_model: model Qwen/Qwen2.5-7B-Instruct is not in the local hub cache" in err
    assert "pods fetch Qwen/Qwen2.5-7B-Instruct" in err and not (tmp_path / "run").exists()


def test_a_hub_id_base_model_resolves_through_the_cache(cache):
    from pods.training.config import TrainConfig

    cfg = TrainConfig(benchmark="gsm8k", base_model=QWEN)
    assert cfg.model_path() == cache / f"models--{QWEN.replace('/', '--')}/snapshots/{hub_cache._commit(QWEN)}"
    assert hub.is_hub_id(QWEN) and not hub.is_hub_id("models/arith/base") and not hub.is_hub_id("./a/b")
    assert not hub.is_hub_id("/abs/path") and not hub.is_hub_id(None)


def test_a_mistyped_local_folder_is_named_missing_and_only_a_hub_id_is_offered_pods_fetch(cache, tmp_path,
                                                                                         monkeypatch, capsys):
    """`models/nope` (under the hub's reserved `models`, or any folder that exists here) is a local
    path: its absence is said as a missing folder, in one line, and nothing is fetched."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "results").mkdir()
    assert not hub.is_hub_id("models/nope") and not hub.is_hub_id("results/nope") and hub.is_hub_id("Qwen/nope")
    assert pods_main(["train", "max_steps=1", "base_model=models/nope", "run_dir=run"]) == 2
    err = capsys.readouterr().err
    assert err == ("pods train: error: base_model: no model folder at models/nope (the folder does not exist); check "
                   "the path, or build a base there as the workflow does: ATEN_CPU_CAPABILITY=avx2 pods warmstart "
                   "benchmark=arith out_dir=models/nope\n")
    assert not (tmp_path / "run").exists() and not (tmp_path / "models").exists()
    assert pods_main(["train", "max_steps=1", "base_model=Qwen/nope", "run_dir=run"]) == 2  # hub-looking: fetch it
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("pods train: error: base_model: model Qwen/nope is not in the local hub cache")
    assert err.endswith("fetch it where the hub is reachable: pods fetch Qwen/nope\n")
