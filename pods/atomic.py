"""Whole files that a reader never sees half-written, and that survive kill -9.

A file is written to a temporary sibling, fsync'd and renamed over the target (`os.replace` is
atomic on POSIX), then the folder is fsync'd so the rename itself is durable. Every whole-file
writer of the package goes through `atomic_write_bytes`; the append-only JSONL run logs are
`pods.runs`'s (`append_jsonl`, `read_jsonl`, `truncate_jsonl`).
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import yaml


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Replace `path` with `data` in one step (its folder is created if needed)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """`atomic_write_bytes` of `text` encoded as UTF-8."""
    atomic_write_bytes(path, text.encode())


def write_json(path: str | os.PathLike, obj: Any) -> None:
    """`obj` as indented JSON (keys in their order) and a final newline, atomically."""
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")


def write_yaml(path: str | os.PathLike, obj: Any) -> None:
    """`obj` as YAML (keys in their order), atomically."""
    atomic_write_text(path, yaml.safe_dump(obj, sort_keys=False))


def read_yaml(path: str | os.PathLike) -> Any:
    return yaml.safe_load(Path(path).read_text())
