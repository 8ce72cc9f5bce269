"""Run-directory files that a reader never sees half-written, and that survive kill -9.

Whole files are written to a temporary sibling, fsync'd and renamed over the target
(`os.replace` is atomic on POSIX). JSONL records are appended one whole line per `write` call,
flushed and fsync'd; on resume the files are cut back to the last checkpoint.
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Callable

import yaml


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
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


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode())


def write_json(path: str | Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")


def write_yaml(path: str | Path, obj: Any) -> None:
    atomic_write_text(path, yaml.safe_dump(obj, sort_keys=False))


def append_jsonl(path: str | Path, record: dict) -> None:
    """Append one record as one line, durably (a single write of the whole line, then fsync)."""
    line = (json.dumps(record) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)


def read_jsonl(path: str | Path) -> list[dict]:
    """Every complete record; a last line without its newline (a write cut by a crash) is skipped."""
    path = Path(path)
    if not path.exists():
        return []
    text = path.read_text()
    lines = text.split("\n")
    complete = lines[:-1]  # the piece after the last newline is empty or partial
    return [json.loads(line) for line in complete if line.strip()]


def truncate_jsonl(path: str | Path, keep: Callable[[dict], bool]) -> int:
    """Rewrite `path` atomically with the records for which `keep` is true; returns how many."""
    path = Path(path)
    records = [r for r in read_jsonl(path) if keep(r)]
    atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in records))
    return len(records)


def read_yaml(path: str | Path) -> Any:
    return yaml.safe_load(Path(path).read_text())
