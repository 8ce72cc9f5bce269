"""Content stamps: whether a derived table or figure is stale by its inputs' contents, not their times.

Snakemake reruns a job whose input is newer than its output, and compares contents only against
the checksums in its own metadata (`.snakemake/`, never committed). A fresh clone gives every file
the time of its checkout, in any order, so without this the first `reproduce` of a clone would
redo analysis whose inputs are the committed ones. Each derived rule of the workflow records, when
it has written its outputs, the sha256 of every input and of its parameters in a stamp file beside
the tables (committed with them); while the workflow parses, `unchanged` compares them with the
inputs as they are. The workflow reads the inputs of a rule whose stamp matches as `ancient`
(their times ignored) and makes one whose stamp differs, or is missing, run. Written by hand: no
workflow library records input contents in a file that travels with the results.

Paths are recorded relative to the stamp's folder, so a copy of the results folder keeps its stamps.
"""
from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from pods.atomic import atomic_write_text

ABSENT = "absent"  # the digest of an input that does not exist (yet)


def file_digest(path: str | os.PathLike) -> str:
    path = Path(path)
    if not path.is_file():
        return ABSENT
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def contents(stamp: str | os.PathLike, inputs: Iterable[str | os.PathLike], params: Mapping | None = None) -> dict:
    """What the stamp records: each input (relative to the stamp's folder) -> sha256, and the
    rule's parameters as JSON."""
    folder = Path(stamp).parent
    files = {os.path.relpath(Path(p).absolute(), folder.absolute()): file_digest(p) for p in inputs}
    return {"inputs": dict(sorted(files.items())), "params": json.loads(json.dumps(params or {}, sort_keys=True,
                                                                                   default=str))}


def write(stamp: str | os.PathLike, inputs: Iterable[str | os.PathLike], params: Mapping | None = None) -> None:
    """Record the inputs a rule's outputs were just written from (called at the end of the job)."""
    Path(stamp).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(stamp, json.dumps(contents(stamp, inputs, params), indent=1) + "\n")


def unchanged(stamp: str | os.PathLike, inputs: Iterable[str | os.PathLike], params: Mapping | None = None) -> bool:
    """True when the stamp exists and every input and parameter is what it records."""
    try:
        recorded = json.loads(Path(stamp).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return False
    current = contents(stamp, inputs, params)
    return ABSENT not in current["inputs"].values() and recorded == current
