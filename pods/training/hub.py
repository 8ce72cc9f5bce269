"""Models and datasets from the Hugging Face hub: fetched once, read locally, recorded exactly.

A study's train jobs never download: `pods fetch` (the workflow's `fetch_hub` rule, run once per
hub id before any train job) resolves a pinned revision through `huggingface_hub.snapshot_download`
into the hub cache and writes a plain folder under the study's `hub_dir` whose files link into
that snapshot, with `hub.json` (hub id, revision asked for, commit resolved). Train jobs read the
folder; the run's provenance copies `hub.json` (`hub_origin`).

`pods train base_model=<hub id>` also works on its own: `resolve` goes through the same cache,
and offline (`HF_HUB_OFFLINE=1`) a model the cache lacks is refused with one line naming the id
and the command that fetches it.

Only the layout of `hub_dir` and the digest-free origin record are ours; downloading, caching,
offline mode and revisions are huggingface_hub's.
"""
from __future__ import annotations

import json
import os
import re
from functools import lru_cache
from pathlib import Path

REPO_TYPES = ("model", "dataset")
ORIGIN = "hub.json"  # in a fetched folder
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_CACHE_SNAPSHOT = re.compile(
    r"(?:models|datasets)--(?P<owner>[^/]+?)--(?P<name>[^/]+)/snapshots/(?P<commit>[0-9a-f]{40})/?$")


# First components that make `a/b` a local path: names the hub keeps for its own pages, which no
# owner can take (`models/x` is a mistyped folder under models_dir, never a hub id).
_RESERVED_OWNERS = frozenset({"models", "datasets", "spaces", "docs"})


def is_hub_id(value: str | os.PathLike | None) -> bool:
    """`owner/name` that is not a local path. A path wins when it exists, is written as a path
    (`./`, `~`, an absolute path, more than one `/`), or starts in a folder that exists here or in a
    name the hub reserves (`models/`): a missing folder is then named as one, not fetched."""
    if value is None:
        return False
    text = str(value)
    if not _HUB_ID.match(text) or text.startswith((".", "~")) or Path(text).exists():
        return False
    owner = text.split("/", 1)[0]
    return owner not in _RESERVED_OWNERS and not Path(owner).is_dir()


def local_name(hub_id: str, repo_type: str = "model") -> str:
    """Where a fetched repository lives under `hub_dir`: `models/<owner>/<name>`, `datasets/...`."""
    return f"{repo_type}s/{hub_id}"


def fetch_command(hub_id: str, repo_type: str = "model", revision: str | None = None) -> str:
    rev = f" --revision {revision}" if revision else ""
    kind = f" --repo-type {repo_type}" if repo_type != "model" else ""
    return f"pods fetch {hub_id}{kind}{rev}"


def _offline() -> bool:
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


def snapshot(hub_id: str, repo_type: str = "model", revision: str | None = None) -> Path:
    """The cached snapshot folder of `hub_id` at `revision`, downloading it when online."""
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(hub_id, repo_type=repo_type, revision=revision))
    except Exception as exc:  # offline and not cached, a wrong id, a revision that does not exist
        where = ("is not in the local hub cache and the hub is offline (HF_HUB_OFFLINE=1)" if _offline()
                 else f"could not be fetched ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})")
        raise FileNotFoundError(f"{repo_type} {hub_id}{'@' + revision if revision else ''} {where}; fetch it "
                                f"where the hub is reachable: {fetch_command(hub_id, repo_type, revision)}") from None


@lru_cache(maxsize=None)
def resolve(hub_id: str, repo_type: str = "model", revision: str | None = None) -> Path:
    """`hub_id` as a local folder (the cache's snapshot); cached so a run resolves it once."""
    return snapshot(hub_id, repo_type, revision)


def commit_of(folder: Path) -> str | None:
    match = _CACHE_SNAPSHOT.search(str(Path(folder).resolve()).replace(os.sep, "/"))
    return match["commit"] if match else None


def fetch(hub_id: str, out: str | os.PathLike, repo_type: str = "model", revision: str | None = None) -> dict:
    """Fetch `hub_id` at `revision` and lay it out in `out`: one link per file of the snapshot
    (no second copy of the weights) and `hub.json`, written last, so its presence means the
    folder is complete. Returns the origin record."""
    if repo_type not in REPO_TYPES:
        raise ValueError(f"repo type must be one of {', '.join(REPO_TYPES)}, got {repo_type!r}")
    source = snapshot(hub_id, repo_type, revision)
    out = Path(out)
    (out / ORIGIN).unlink(missing_ok=True)
    for path in sorted(source.rglob("*")):
        if path.is_dir():
            continue
        target = out / path.relative_to(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.unlink(missing_ok=True)
        target.symlink_to(path.resolve())
    origin = {"hub_id": hub_id, "repo_type": repo_type, "revision": revision or "main",
              "commit": commit_of(source)}
    tmp = out / (ORIGIN + ".tmp")
    tmp.write_text(json.dumps(origin, indent=1) + "\n")
    tmp.replace(out / ORIGIN)
    return origin


def hub_origin(folder: str | os.PathLike) -> dict | None:
    """Where a local model or dataset folder came from: its `hub.json` when `pods fetch` wrote it,
    else the hub id and commit read off a hub-cache snapshot path; None for any other folder."""
    folder = Path(folder)
    if (folder / ORIGIN).is_file():
        return json.loads((folder / ORIGIN).read_text())
    match = _CACHE_SNAPSHOT.search(str(folder.resolve()).replace(os.sep, "/"))
    if not match:
        return None
    kind = "dataset" if "/datasets--" in str(folder.resolve()) else "model"
    return {"hub_id": f"{match['owner']}/{match['name']}", "repo_type": kind, "revision": None,
            "commit": match["commit"]}


def add_arguments(parser) -> None:
    """`pods fetch <hub id> [--repo-type dataset] [--revision R] [--out DIR]`."""
    parser.add_argument("hub_id", help="owner/name on the hub")
    parser.add_argument("--repo-type", default="model", choices=REPO_TYPES)
    parser.add_argument("--revision", default=None, help="commit hash, tag or branch (default: main)")
    parser.add_argument("--out", default=None, help="lay the snapshot out here with hub.json (default: only cache it)")
    parser.set_defaults(func=_cmd_fetch)


def _cmd_fetch(args) -> int:
    if not _HUB_ID.match(args.hub_id):
        raise ValueError(f"{args.hub_id!r} is not a hub id (owner/name)")
    if args.out:
        origin = fetch(args.hub_id, args.out, args.repo_type, args.revision)
        print(f"{args.hub_id} at {origin['commit'] or origin['revision']} -> {args.out}")
    else:
        print(snapshot(args.hub_id, args.repo_type, args.revision))
    return 0
