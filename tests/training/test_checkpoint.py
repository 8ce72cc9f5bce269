"""Checkpoints carry data only: a planted pickle never runs, a changed file is refused by name,
and the state that comes back continues exactly where the saved one would have."""
from __future__ import annotations

import hashlib
import json
import pickle
import random
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

import pods.training.checkpoint as ckpt
from helpers import pods_train
from pods.training.rundir import rng_state, set_rng_state

pytestmark = pytest.mark.usefixtures("toy_task")


class Payload:
    """Unpickling this writes `marker`: what a file planted in a shared results folder could do."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return exec, (f"open({self.marker!r}, 'w').write('code ran')",)


def test_the_payload_is_live(tmp_path):
    """The planted file of the tests below really runs code when unpickled."""
    marker = tmp_path / "marker"
    pickle.loads(pickle.dumps({"engine": Payload(marker)}))
    assert marker.read_text() == "code ran"


def test_nested_state_round_trips_and_an_optimiser_continues_exactly(tmp_path):
    torch.manual_seed(0)
    a, b = torch.nn.Linear(4, 3), torch.nn.Linear(4, 3)
    opt_a, opt_b = (torch.optim.AdamW(m.parameters(), lr=0.1, betas=(0.8, 0.9)) for m in (a, b))
    sched_a = torch.optim.lr_scheduler.LambdaLR(opt_a, lambda step: 1.0 / (step + 1))
    sched_b = torch.optim.lr_scheduler.LambdaLR(opt_b, lambda step: 1.0 / (step + 1))
    x = torch.randn(5, 4)
    for _ in range(2):
        opt_a.zero_grad()
        a(x).square().sum().backward()
        opt_a.step()
        sched_a.step()
    tied = torch.randn(3)
    state = {"model": a.state_dict(), "optimizer": opt_a.state_dict(), "scheduler": sched_a.state_dict(),
             "tied": {"w": tied, "v": tied}, "ints": {0: "zero", 7: (1, 2.5, None)}, "flag": True,
             "array": np.arange(5, dtype=np.uint32), "scalar": np.float64(0.25), "inf": float("inf"),
             "rng": rng_state()}
    ckpt.save(tmp_path, state)
    manifest = ckpt.read_manifest(tmp_path)
    ckpt.verify(tmp_path, manifest)
    back = ckpt.load(tmp_path, manifest)
    assert back["ints"] == {0: "zero", 7: (1, 2.5, None)} and back["flag"] is True and back["inf"] == float("inf")
    assert back["array"].dtype == np.uint32 and back["array"].tolist() == [0, 1, 2, 3, 4]
    assert torch.equal(back["tied"]["w"], tied) and torch.equal(back["tied"]["v"], tied)
    assert back["optimizer"]["param_groups"][0]["betas"] == (0.8, 0.9)
    assert sorted(back["optimizer"]["state"]) == [0, 1]  # parameter ids stay integers
    b.load_state_dict(back["model"])
    opt_b.load_state_dict(back["optimizer"])
    sched_b.load_state_dict(back["scheduler"])
    for model, opt, sched in ((a, opt_a, sched_a), (b, opt_b, sched_b)):
        opt.zero_grad()
        model(x).square().sum().backward()
        opt.step()
        sched.step()
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    # the RNG states come back as the same streams
    set_rng_state(back["rng"])
    first = (random.random(), np.random.rand(), torch.rand(2))
    set_rng_state(back["rng"])
    again = (random.random(), np.random.rand(), torch.rand(2))
    assert first[:2] == again[:2] and torch.equal(first[2], again[2])
    # the JSON half is plain JSON: no pickle anywhere in the folder
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json", "tensors-1.safetensors"]
    json.loads((tmp_path / "state.json").read_text())


def test_a_second_save_replaces_the_first_whole(tmp_path):
    ckpt.save(tmp_path, {"x": torch.zeros(2)})
    ckpt.save(tmp_path, {"x": torch.ones(2)})
    manifest = ckpt.read_manifest(tmp_path)
    assert manifest["save"] == 2 and sorted(p.name for p in tmp_path.iterdir()) == ["state.json",
                                                                                    "tensors-2.safetensors"]
    assert torch.equal(ckpt.load(tmp_path, manifest)["x"], torch.ones(2))


def test_what_the_state_cannot_hold_is_refused_when_saved(tmp_path):
    with pytest.raises(TypeError, match=r"checkpoint state /engine/fn: function is not data"):
        ckpt.save(tmp_path, {"engine": {"fn": lambda: 0}})
    assert not (tmp_path / "state.json").exists()


def test_library_files_are_checked_before_their_loader_sees_them(tmp_path):
    marker = tmp_path / "marker"
    library = tmp_path / "ckpt" / "deepspeed" / "save1"
    library.mkdir(parents=True)
    (library / "mp_rank_00_model_states.pt").write_bytes(pickle.dumps({"weights": [1.0]}))
    ckpt.save(tmp_path / "ckpt", {"tag": "save1"}, library_files=sorted(library.iterdir()))
    manifest = ckpt.read_manifest(tmp_path / "ckpt")
    ckpt.verify(tmp_path / "ckpt", manifest)
    ckpt.verify_listed(tmp_path / "ckpt", manifest, sorted(library.iterdir()))
    # a file swapped for one whose pickle runs code: refused by name before anything reads it
    (library / "mp_rank_00_model_states.pt").write_bytes(pickle.dumps(Payload(marker)))
    with pytest.raises(ckpt.CheckpointError, match=r"mp_rank_00_model_states.pt does not match the sha256"):
        ckpt.verify(tmp_path / "ckpt", manifest)
    # a file added beside the ones the save wrote
    (library / "mp_rank_00_model_states.pt").write_bytes(pickle.dumps({"weights": [1.0]}))
    (library / "zero_pp_rank_0_mp_rank_00_optim_states.pt").write_bytes(pickle.dumps(Payload(marker)))
    ckpt.verify(tmp_path / "ckpt", manifest)
    with pytest.raises(ckpt.CheckpointError, match=r"zero_pp_rank_0_mp_rank_00_optim_states.pt is not in the"):
        ckpt.verify_listed(tmp_path / "ckpt", manifest, sorted(library.iterdir()))
    assert not marker.exists()


# --- through `pods train`: what a planted file does on resume --------------------------------------
def resumable(base, tmp_path, capsys) -> Path:
    """A run that stopped after 2 steps; `max_steps=4` resumes it."""
    run_dir = tmp_path / "run"
    assert pods_train(base, run_dir, "max_steps=2") == 0
    capsys.readouterr()
    names = sorted(p.name for p in (run_dir / "checkpoint").iterdir())
    assert len(names) == 2 and names[0] == "state.json" and names[1].startswith("tensors-"), names
    return run_dir


def refusal(capsys) -> str:
    errors = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(errors) == 1 and errors[0].startswith("pods train: error: "), errors
    return errors[0]


def test_a_planted_pickle_checkpoint_is_refused_and_never_runs(base, tmp_path, capsys):
    run_dir, marker = resumable(base, tmp_path, capsys), tmp_path / "marker"
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    shutil.rmtree(run_dir / "checkpoint")
    (run_dir / "checkpoint").mkdir()
    (run_dir / "checkpoint" / "state.pt").write_bytes(pickle.dumps({"engine": Payload(marker)}))
    assert pods_train(base, run_dir, "max_steps=4") == 2
    err = refusal(capsys)
    assert "checkpoint/state.pt is a checkpoint in the pickle format of an earlier version" in err
    assert "--restart" in err and not marker.exists()
    # nothing of the run was touched
    assert all(p.read_bytes() == data for p, data in before.items() if "checkpoint" not in p.parts)


def test_a_pickle_in_place_of_the_tensors_is_refused_even_with_a_matching_manifest(base, tmp_path, capsys):
    run_dir, marker = resumable(base, tmp_path, capsys), tmp_path / "marker"
    folder = run_dir / "checkpoint"
    manifest = json.loads((folder / "state.json").read_text())
    planted = pickle.dumps(Payload(marker))
    (folder / manifest["tensors"]).write_bytes(planted)
    manifest["files"][manifest["tensors"]] = hashlib.sha256(planted).hexdigest()  # the manifest rewritten too
    (folder / "state.json").write_text(json.dumps(manifest))
    assert pods_train(base, run_dir, "max_steps=4") == 2
    err = refusal(capsys)
    assert f"{manifest['tensors']} is not a safetensors file" in err and not marker.exists()


def test_a_changed_checkpoint_file_is_refused_naming_it(base, tmp_path, capsys):
    run_dir = resumable(base, tmp_path, capsys)
    tensors = next((run_dir / "checkpoint").glob("tensors-*.safetensors"))
    data = bytearray(tensors.read_bytes())
    data[-1] ^= 0xFF  # one bit of one weight
    tensors.write_bytes(bytes(data))
    assert pods_train(base, run_dir, "max_steps=4") == 2
    err = refusal(capsys)
    assert f"{tensors} does not match the sha256 the run recorded when it wrote it" in err


def test_a_first_save_cut_short_is_not_read_and_the_run_starts_over(base, tmp_path):
    run_dir = tmp_path / "run"
    (run_dir / "checkpoint").mkdir(parents=True)
    (run_dir / "checkpoint" / "tensors-1.safetensors").write_bytes(b"half a file")  # no state.json yet
    assert pods_train(base, run_dir, "max_steps=2") == 0
    steps = [json.loads(line)["step"] for line in (run_dir / "steps.jsonl").read_text().splitlines()]
    assert steps == [1, 2]
