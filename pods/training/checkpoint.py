"""Checkpoints that carry data only: resuming a run never executes code from its run directory.

Results folders are often shared on a cluster, and `snakemake reproduce` resumes unfinished runs
without asking, so a checkpoint must not be able to run code when it is read. Unpickling can
(`torch.load` that allows any global), so the trainer's own state is written as:

    checkpoint/tensors-<k>.safetensors   every tensor of the state (model, optimiser moments, RNG)
    checkpoint/state.json                everything else as JSON (progress counters, optimiser and
                                         scheduler settings, Python's and numpy's RNG states), the
                                         tensors by name, and the manifest: file -> sha256

with `-rank<r>` after `tensors` / `state` when a run has several processes. `state.json` is
written last and names the tensor file of its own save (`k` counts the saves), so a kill at any
moment leaves the previous save whole; the older tensor file is removed after the new
`state.json` is in place.

The manifest also lists the files an update engine's library writes and reads with its own loader
(`UpdateEngine.checkpoint_files`): DeepSpeed's `load_checkpoint` unpickles its `*.pt` files, which
this package does not control. Every listed file's sha256 is checked before anything is loaded,
and a file in such a folder that the manifest does not list is refused. The digests catch a file
changed or planted after the save; they cannot tell a planted file from ours when whoever planted
it also rewrote `state.json`, which is why the trainer's own files are data only (docs/contracts.md).

Nested state is stored by hand (safetensors holds a flat name -> tensor table, JSON no tensors,
tuples or integer keys); the encoding is the few lines of `_encode` / `_decode`.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import load as load_tensors
from safetensors.torch import save as save_tensors

from pods.atomic import atomic_write_bytes, write_json
from pods.runs import RunDirError

FORMAT = 1
# Markers of the JSON encoding; a state dict key that is one of them is refused when saved.
TENSOR, TUPLE, ITEMS, ARRAY = "__tensor__", "__tuple__", "__items__", "__ndarray__"
# The checkpoint files of earlier versions: a pickle, which resume does not open.
PICKLE_GLOB = "state*.pt"


class CheckpointError(RunDirError):
    """A checkpoint that resume refuses to read (its message says how to start over)."""


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 24), b""):
            digest.update(chunk)
    return digest.hexdigest()


# --- nested state <-> (JSON, flat tensor table) ---------------------------------------------------
def _encode(value, path: str, tensors: dict, storages: set):
    if isinstance(value, torch.Tensor):
        tensor = value.detach().cpu().contiguous()
        pointer = tensor.untyped_storage().data_ptr()
        if tensor.numel() and pointer in storages:  # tied weights: safetensors stores each once
            tensor = tensor.clone()
        storages.add(tensor.untyped_storage().data_ptr())
        tensors[path] = tensor
        return {TENSOR: path}
    if isinstance(value, np.ndarray):
        return {ARRAY: value.tolist(), "dtype": str(value.dtype)}
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, tuple):
        return {TUPLE: [_encode(v, f"{path}/{i}", tensors, storages) for i, v in enumerate(value)]}
    if isinstance(value, list):
        return [_encode(v, f"{path}/{i}", tensors, storages) for i, v in enumerate(value)]
    if isinstance(value, dict):
        if all(isinstance(k, str) for k in value) and not {TENSOR, TUPLE, ITEMS, ARRAY} & value.keys():
            return {k: _encode(v, f"{path}/{k}", tensors, storages) for k, v in value.items()}
        if not all(isinstance(k, (str, int)) for k in value):
            raise TypeError(f"checkpoint state {path or '/'}: keys must be str or int, got {sorted(map(type, value))}")
        return {ITEMS: [[k, _encode(v, f"{path}/{k}", tensors, storages)] for k, v in value.items()]}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"checkpoint state {path or '/'}: {type(value).__name__} is not data a checkpoint can hold")


def _decode(value, tensors: dict):
    if isinstance(value, list):
        return [_decode(v, tensors) for v in value]
    if not isinstance(value, dict):
        return value
    if TENSOR in value:
        return tensors[value[TENSOR]]
    if ARRAY in value:
        return np.asarray(value[ARRAY], dtype=value["dtype"])
    if TUPLE in value:
        return tuple(_decode(v, tensors) for v in value[TUPLE])
    if ITEMS in value:
        return {k: _decode(v, tensors) for k, v in value[ITEMS]}
    return {k: _decode(v, tensors) for k, v in value.items()}


# --- save and load ----------------------------------------------------------------------------------
def manifest_path(folder: Path, suffix: str = "") -> Path:
    return folder / f"state{suffix}.json"


def save(folder: Path, state: dict, *, suffix: str = "", library_files: list[Path] = ()) -> None:
    """Write `state` (nested dicts, lists, tuples, tensors, arrays, scalars) as one save.

    `library_files`: files an engine's library wrote for this save (under `folder`); their digests
    go into the manifest so that `load` checks them before that library reads them.
    """
    folder.mkdir(parents=True, exist_ok=True)
    manifest = manifest_path(folder, suffix)
    previous = json.loads(manifest.read_text()) if manifest.is_file() else {}
    k = int(previous.get("save", 0)) + 1
    tensors: dict = {}
    skeleton = _encode(state, "", tensors, set())
    data = save_tensors(tensors)
    name = f"tensors{suffix}-{k}.safetensors"
    atomic_write_bytes(folder / name, data)
    files = {name: hashlib.sha256(data).hexdigest()}
    files |= {str(p.relative_to(folder)): sha256(p) for p in sorted(library_files)}
    write_json(manifest, {"format": FORMAT, "save": k, "tensors": name, "files": files, "state": skeleton})
    for old in folder.glob(f"tensors{suffix}-*.safetensors"):  # only this save's file is named now
        if old.name != name:
            old.unlink(missing_ok=True)


def read_manifest(folder: Path, suffix: str = "") -> dict:
    """The manifest of the last whole save; refuses a pickle of an earlier version in its place."""
    path = manifest_path(folder, suffix)
    if not path.is_file():
        pickles = sorted(p.name for p in folder.glob(PICKLE_GLOB))
        if pickles:
            raise CheckpointError(f"{folder}/{pickles[0]} is a checkpoint in the pickle format of an earlier "
                                  "version, which resume does not open (unpickling can run code); pass --restart "
                                  "to train the run again from step 0")
        raise CheckpointError(f"{path}: no checkpoint manifest; pass --restart to train the run again from step 0")
    try:
        manifest = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{path} is not valid JSON ({e.msg}); pass --restart to train the run again "
                              "from step 0") from None
    if (manifest.get("format") != FORMAT or not isinstance(manifest.get("files"), dict)
            or manifest.get("tensors") not in manifest["files"]):
        raise CheckpointError(f"{path}: not a checkpoint manifest of format {FORMAT}; pass --restart to train "
                              "the run again from step 0")
    return manifest


def verify(folder: Path, manifest: dict) -> None:
    """Every file the manifest lists is there with the sha256 recorded when it was written."""
    for name, digest in manifest["files"].items():
        path = folder / name
        if Path(name).is_absolute() or ".." in Path(name).parts:
            raise CheckpointError(f"{manifest_path(folder)} lists {name!r}, outside {folder}")
        if not path.is_file():
            raise CheckpointError(f"{path} is missing; pass --restart to train the run again from step 0")
        if sha256(path) != digest:
            raise CheckpointError(f"{path} does not match the sha256 the run recorded when it wrote it; "
                                  "pass --restart to train the run again from step 0")
    tensors = folder / manifest["tensors"]
    try:  # the header only: a file whose digest was rewritten with it is still no pickle
        with safe_open(str(tensors), framework="pt"):
            pass
    except Exception as e:
        raise CheckpointError(f"{tensors} is not a safetensors file ({e}); pass --restart to train the run "
                              "again from step 0") from None


def verify_listed(folder: Path, manifest: dict, library_files: list[Path]) -> None:
    """Every file an engine's library would read is one the manifest lists (and `verify` checked)."""
    for path in library_files:
        if str(path.relative_to(folder)) not in manifest["files"]:
            raise CheckpointError(f"{path} is not in the checkpoint's manifest (its save did not write it); "
                                  "remove it, or pass --restart to train the run again from step 0")


def check_folder(folder: Path) -> None:
    """`read_manifest` and `verify` for every process's save in `folder` (the early, read-only check)."""
    suffixes = [p.name[len("state"):-len(".json")] for p in sorted(folder.glob("state*.json"))] or [""]
    for suffix in suffixes:
        verify(folder, read_manifest(folder, suffix))


def load(folder: Path, manifest: dict) -> dict:
    """The state of a verified manifest (`verify` first): JSON and safetensors only."""
    path = folder / manifest["tensors"]
    try:
        tensors = load_tensors(path.read_bytes())
    except Exception as e:  # safetensors parses a header and raw buffers: nothing in them can run
        raise CheckpointError(f"{path} is not a safetensors file ({e}); pass --restart to train the run "
                              "again from step 0") from None
    return _decode(manifest["state"], tensors)
