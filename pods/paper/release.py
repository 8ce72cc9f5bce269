"""The authors' release: which files it holds (their names and what each setting is), and the
folder downloaded at the pinned commit with every file's sha256 checked against the manifest."""
from __future__ import annotations

import hashlib
import os
import urllib.request
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Mapping

import yaml

from pods.atomic import atomic_write_bytes, atomic_write_text
from pods.vocabulary import method_for

RELEASE_REPO = "YixuanEvenXu/pods"
RELEASE_COMMIT = "187f43b648f69385103029c2dd0934521e17bb71"
RELEASE_URL = "https://raw.githubusercontent.com/{repo}/{commit}/results/{file}"
# Package data (config/release_manifest.yaml links to it), so an installed wheel has it too.
MANIFEST = Path(str(resources.files("pods") / "data" / "release_manifest.yaml"))

RULES = {None: "max_variance", "MaxR": "max_reward", "Rand": "random"}
RUNS_PER_SETTING = 10


@dataclass(frozen=True)
class Family:
    """A group of single-GPU release files sharing a base model and an evaluation protocol."""

    benchmark: str       # run-directory component
    eval_set: str        # the benchmark's own test set (what the paper plots)
    metric: str          # per-repeat accuracy field the paper plots
    base_file: str       # base-model evaluation, the t = 0 point
    interval_s: int      # checkpoint k was saved after k x interval_s of training
    horizon_s: int       # end of the plotted curve and of the s/step measurement
    model: str


FAMILIES = {
    "GSM8K": Family("gsm8k", "gsm8k", "ans_acc", "base-qwen.json", 1800, 21600, "Qwen/Qwen2.5-3B-Instruct"),
    "MATH-NF": Family("math", "math500", "ans_acc", "base-qwen.json", 1800, 21600, "Qwen/Qwen2.5-3B-Instruct"),
    "Llama": Family("gsm8k-llama", "gsm8k", "both_acc", "base-llama.json", 600, 5400,
                    "Llama-3.2 Instruct (size not stated in the release)"),
}
SINGLE_GPU_HARDWARE = "l40s-lora"


@dataclass(frozen=True)
class Cluster:
    """A pair of wandb exports of 8-GPU runs."""

    hardware: str
    prefix: str
    model: str
    eval_log_calls: int    # wandb log calls per evaluation (docs/paper.md 4.1), for inferred_optimizer_steps
    horizon_s: int = 1800  # the authors plot and measure 0-30 min
    grid_s: int = 120


CLUSTERS = {
    # wandb log calls per evaluation that fit every released evaluation exactly (but the final
    # ones, see inferred_optimizer_steps); a mismatch stops the import
    "h100s": Cluster("h100x8-zero2", "GRPO", "Qwen/Qwen2.5-3B-Instruct", eval_log_calls=5),
    "a100s": Cluster("a100x8-zero2", "GR7B", "7B instruct model (likely Qwen/Qwen2.5-7B-Instruct)", eval_log_calls=45),
}

# release file prefix -> (family, rule suffix, n, m, beta suffix): every single-GPU setting released
SINGLE_GPU_SETTINGS = [
    *[("GSM8K", None, n, 16, None) for n in (16, 32, 64, 128, 256)],
    *[("GSM8K", None, 64, m, None) for m in (8, 4, 2)],
    ("GSM8K", "MaxR", 64, 16, None),
    ("GSM8K", "Rand", 64, 16, None),
    ("MATH-NF", None, 8, 8, None),
    ("MATH-NF", None, 32, 8, None),
    ("Llama", None, 16, 16, "0.04"),
    ("Llama", None, 64, 16, "0.04"),
]


def setting_prefix(family: str, rule: str | None, n: int, m: int, beta: str | None) -> str:
    parts = ["Instruct", family] + ([rule] if rule else []) + ["512", str(n), str(m)] + ([beta] if beta else [])
    return "-".join(parts)


def setting_method(rule: str | None, n: int, m: int) -> str:
    return method_for(n, m, RULES[rule]).name


def release_files() -> list[str]:
    """Every file of the release's results/ folder that the paper's figures use."""
    files = [f"{setting_prefix(*s)}-Run{k}.json" for s in SINGLE_GPU_SETTINGS
             for k in range(1, RUNS_PER_SETTING + 1)]
    files += sorted({fam.base_file for fam in FAMILIES.values()})
    files += [f"{name}-{kind}.csv" for name in CLUSTERS for kind in ("acc", "length")]
    return files


# --------------------------------------------------------------------------------------------
# Download with checksums
# --------------------------------------------------------------------------------------------
def sha256_file(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def make_manifest(src: str | os.PathLike) -> dict:
    """Checksums of the release files present in `src`; absent ones get `null` (downloaded unpinned)."""
    src = Path(src)
    files = {name: (sha256_file(src / name) if (src / name).exists() else None) for name in release_files()}
    return {"repo": RELEASE_REPO, "commit": RELEASE_COMMIT, "url": RELEASE_URL, "files": files}


def load_manifest(path: str | os.PathLike = MANIFEST) -> dict:
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"release manifest {path} does not exist")
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    release = data.get("release", data)
    for key in ("repo", "commit", "url", "files"):
        if key not in release:
            raise ValueError(f"{path}: release manifest lacks {key!r}")
    return release


def download_release(dest: str | os.PathLike, manifest: Mapping, url: str | None = None,
                     timeout_s: float = 60) -> Path:
    """Fetch every manifest file into `dest` and check its sha256 where the manifest pins one.

    Files already in `dest` with the pinned checksum are kept. Writes `dest/SHA256SUMS` with the
    checksum of every file fetched (the record for files the manifest could not pin).
    """
    dest = Path(dest)
    template = url or manifest["url"]
    sums = []
    for name, expected in manifest["files"].items():
        target = dest / name
        if not (expected and target.exists() and sha256_file(target) == expected):
            source = template.format(repo=manifest["repo"], commit=manifest["commit"], file=name)
            try:
                with urllib.request.urlopen(source, timeout=timeout_s) as response:
                    data = response.read()
            except OSError as exc:
                raise FileNotFoundError(f"could not download {name} from {source}: {exc}") from None
            got = hashlib.sha256(data).hexdigest()
            if expected and got != expected:
                raise ValueError(f"{name}: sha256 {got} does not match the manifest's {expected}")
            atomic_write_bytes(target, data)
        sums.append(f"{sha256_file(target)}  {name}")
    atomic_write_text(dest / "SHA256SUMS", "\n".join(sums) + "\n")
    return dest


