"""The workflow on a real SLURM cluster: the one-node test cluster of scripts/slurm_test_cluster.sh.

Runs only while such a cluster answers (CI's `slurm` stage starts one; by hand:
`bash scripts/slurm_test_cluster.sh start`, then `pytest -m slurm -s tests/workflow/test_slurm.py`, then
`... stop`); elsewhere the tests are skipped, saying so. The smoke study goes through
`--workflow-profile profiles/slurm` with the settings such a cluster needs (no accounting
database: `--slurm-no-account --slurm-status-command squeue`; its partition). Checked:
- every train job is a real sbatch job of the cluster that completed, asking for the CPUs and
  memory of its hardware profile (config/hardware/cpu.yaml);
- the results have the form of a local run of the same study, file for file and key for key,
  and the same values apart from times (training is deterministic on one CPU thread);
- `reproduce` run again submits nothing;
- a run of a profile derived from config/hardware/multinode.yaml (torchrun under `srun` inside
  the job, c10d rendezvous on the job's first node) trains with 2 DeepSpeed processes over gloo.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from helpers import run_at

REPO = Path(__file__).resolve().parents[2]
PARTITION = os.environ.get("SLURM_TEST_PARTITION", "podstest")
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}


def cluster_answers() -> bool:
    if not shutil.which("sinfo"):
        return False
    try:  # a configured cluster whose controller is down makes sinfo retry for a while
        proc = subprocess.run(["sinfo", "-h", "-p", PARTITION, "-o", "%a"], capture_output=True, text=True, timeout=20)
    except subprocess.TimeoutExpired:
        return False
    return proc.returncode == 0 and "up" in proc.stdout


pytestmark = [
    pytest.mark.slurm,
    pytest.mark.skipif(not cluster_answers(), reason=f"no SLURM partition {PARTITION!r} answers: "
                       "start the test cluster with `bash scripts/slurm_test_cluster.sh start`"),
]
# Times, other clock readings (the cost clock's measured step costs and their standard errors
# included) and the load average: measurements of the machine, the only fields in which two runs
# of the same study may differ.
TIMING = re.compile(r"(_s|_se|_time|time_s|s_per_step|wall.*|^load_avg_1m)$")


def redirect(tmp: Path, name: str, models: str | None = None, **extra) -> Path:
    """A last config layer sending the study's outputs (and its warm start) under tmp/name."""
    layer = tmp / f"{name}.yaml"
    layer.write_text(yaml.safe_dump({
        "results_dir": str(tmp / name / "results"), "models_dir": str(tmp / (models or name) / "models"),
        "figures_dir": str(tmp / name / "figures"), **extra,
    }))
    return layer


def snakemake(*args, log: Path) -> str:
    proc = subprocess.run([sys.executable, "-m", "snakemake", *map(str, args)], cwd=REPO, env=ENV,
                          capture_output=True, text=True)
    log.write_text(proc.stdout + proc.stderr)
    assert proc.returncode == 0, f"snakemake {' '.join(map(str, args))} failed:\n{(proc.stdout + proc.stderr)[-4000:]}"
    return proc.stdout + proc.stderr


def slurm_args(tmp: Path) -> list[str]:
    """profiles/slurm plus what the test cluster needs: the settings its comments describe."""
    profile = yaml.safe_load((REPO / "profiles/slurm/config.yaml").read_text())
    # on the command line these replace the profile's lists, so the profile's own values go first
    defaults = {**profile["default-resources"], "slurm_partition": PARTITION}
    train = {**profile["set-resources"]["train"], "slurm_partition": PARTITION}
    return [
        "--workflow-profile", "profiles/slurm",
        "--slurm-no-account", "--slurm-status-command", "squeue",
        "--slurm-init-seconds-before-status-checks", "5",
        "--slurm-logdir", tmp / "slurm-logs",
        "--default-resources", *(f"{k}={v}" for k, v in defaults.items()),
        "--set-resources", *(f"train:{k}={v}" for k, v in train.items()),
    ]


def submitted(text: str) -> list[int]:
    """SLURM job ids the plugin reports having submitted with sbatch."""
    return [int(j) for j in re.findall(r"has been submitted with SLURM jobid (\d+)", text)]


def jobs(ids: list[int]) -> list[dict]:
    """What the cluster says of each job: name of the rule (the plugin's comment), state, CPUs, memory."""
    out = subprocess.run(
        ["squeue", "--states=all", "--noheader", "-o", "%i|%k|%T|%C|%m|%P", "--jobs", ",".join(map(str, ids))],
        capture_output=True, text=True, check=True,
    ).stdout
    rows = [dict(zip(("id", "comment", "state", "cpus", "memory", "partition"), line.split("|")))
            for line in out.splitlines() if line.strip()]
    return sorted(rows, key=lambda r: int(r["id"]))


def print_jobs(title: str, rows: list[dict], capsys) -> None:
    with capsys.disabled():
        print(f"\n{title}\n{'JOBID':>6} {'STATE':<10} {'CPUS':>4} {'MEM':>7} {'PARTITION':<10} COMMENT (rule and "
              f"wildcards)")
        for r in rows:
            print(f"{r['id']:>6} {r['state']:<10} {r['cpus']:>4} {r['memory']:>7} {r['partition']:<10} {r['comment']}")


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def without_times(record: dict, root: Path | None = None) -> dict:
    """`record` without its timings at any depth, paths under `root` (the study's own folder,
    which the provenance records) made relative, so the two studies compare key by key."""
    def clean(value):
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items() if not TIMING.search(k)}
        if isinstance(value, str) and root is not None:
            return value.replace(str(root), "<study>")
        return value
    return clean(record)


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    """The smoke study once through SLURM and once locally, then `reproduce` again through SLURM."""
    tmp = tmp_path_factory.mktemp("slurm")
    study = ["reproduce", "--configfile", "config/smoke.yaml"]
    text = snakemake(*study, redirect(tmp, "slurm"), *slurm_args(tmp), log=tmp / "slurm.log")
    ids = submitted(text)
    local = snakemake(*study, redirect(tmp, "local"), "--cores", "2", log=tmp / "local.log")
    again = snakemake(*study, redirect(tmp, "slurm"), *slurm_args(tmp), log=tmp / "again.log")
    return dict(tmp=tmp, ids=ids, jobs=jobs(ids), local=local, again=again)


def test_every_train_job_was_an_sbatch_job_with_the_profiles_request(smoke, capsys):
    print_jobs("SLURM jobs of the smoke study (squeue --states=all)", smoke["jobs"], capsys)
    profile = yaml.safe_load((REPO / "config/hardware/cpu.yaml").read_text())["resources"]
    config = {**yaml.safe_load((REPO / "config/config.yaml").read_text()),
              **yaml.safe_load((REPO / "config/smoke.yaml").read_text())}
    runs = {(c["baseline"], s) for c in config["comparisons"] for s in config["seeds"]}
    runs |= {(m, s) for c in config["comparisons"] for m in c["methods"] for s in config["seeds"]}
    train = [j for j in smoke["jobs"] if j["comment"].startswith("rule_train_")]
    assert len(smoke["jobs"]) == len(smoke["ids"])  # the cluster knows every job the plugin submitted
    assert len(train) == len(runs) == 10
    for job in train:
        assert job["state"] == "COMPLETED" and job["partition"] == PARTITION, job
        assert int(job["cpus"]) == profile["cpus_per_task"], job
        assert job["memory"] == f"{profile['mem_mb']}M", job
    assert {j["state"] for j in smoke["jobs"]} == {"COMPLETED"}


def test_results_have_the_form_of_a_local_run(smoke):
    slurm, local = smoke["tmp"] / "slurm/results", smoke["tmp"] / "local/results"
    files = {p.relative_to(slurm) for p in slurm.rglob("*") if p.is_file()}
    assert files == {p.relative_to(local) for p in local.rglob("*") if p.is_file()}
    assert any(p.name == "summary.json" for p in files)
    for rel in sorted(files):
        if rel.suffix == ".jsonl":
            a, b = records(slurm / rel), records(local / rel)
            assert [r.keys() for r in a] == [r.keys() for r in b], rel
            assert [without_times(r) for r in a] == [without_times(r) for r in b], rel
        elif rel.name == "summary.json":
            a, b = json.loads((slurm / rel).read_text()), json.loads((local / rel).read_text())
            assert a.keys() == b.keys(), rel
            studies = smoke["tmp"] / "slurm", smoke["tmp"] / "local"
            assert without_times(a, studies[0]) == without_times(b, studies[1]), rel
    header = lambda path: path.read_text().splitlines()[0]  # noqa: E731
    assert header(slurm / "summary.csv") == header(local / "summary.csv")
    figures = lambda root: sorted(p.relative_to(root) for p in root.rglob("*.png"))  # noqa: E731
    assert figures(smoke["tmp"] / "slurm/figures") == figures(smoke["tmp"] / "local/figures") != []


def test_reproduce_again_submits_nothing(smoke):
    assert submitted(smoke["again"]) == []
    # no training and no warm start; the analysis (local rules) may run once more, since it now
    # reads the finished runs' files rather than waiting for their summary.json
    assert "rule train:" not in smoke["again"] and "rule warmstart:" not in smoke["again"]


def deepspeed_profile() -> dict:
    """config/hardware/multinode.yaml made to fit the test cluster: one node, 2 CPU processes.

    The launch is multinode.yaml's: the job runs the command as it is (`mpi: srun`), and the
    command starts torchrun through `srun` once, which meets its processes at a c10d rendezvous
    on the job's first node. The plugin takes `mpi` only with more than one task, so the job
    asks for 2 tasks of 1 CPU and the srun step for 1 task of both CPUs.
    """
    profile = yaml.safe_load((REPO / "config/hardware/multinode.yaml").read_text())
    profile.update(description="multinode.yaml on one CPU node: 2 DeepSpeed processes over gloo",
                   nodes=1, num_processes=2, threads=2, launcher_prefix="srun --nodes=1 --ntasks=1 --cpus-per-task=2")
    profile["resources"].update(gpu=0, cpus_per_task=1, mem_mb=6000, runtime=30, nodes=1, tasks=2)
    assert profile["resources"]["mpi"] == "srun"
    profile["train"].update(device="cpu", num_threads=1, precision="fp32", gradient_checkpointing=False,
                            deepspeed_zero_stage=2, dist_backend="gloo", micro_batch=4)
    return profile


def test_deepspeed_two_processes_launched_inside_a_slurm_job(smoke, capsys):
    tmp = smoke["tmp"]
    hardware = tmp / "hardware"
    hardware.mkdir()
    (hardware / "cpu-ddp.yaml").write_text(yaml.safe_dump(deepspeed_profile()))
    # the cost clock measures in one process: a multi-process profile trains on the measured clock
    layer = redirect(tmp, "deepspeed", models="slurm", hardware_dir=str(hardware), seeds=[0], clock="time",
                     comparisons=[{
        "name": "main", "design": "equal_update", "benchmarks": ["arith"], "hardware": ["cpu-ddp"],
        "grid_s": 1, "t_max_s": 4, "align": "nearest", "baseline": "grpo-n4-m4",
        "methods": ["pods-max_variance-n8-m4"],
    }])
    # the smoke study's warm start (same models_dir) is reused: only the two runs are trained
    text = snakemake("reproduce", "--configfile", "config/smoke.yaml", layer, *slurm_args(tmp),
                     log=tmp / "deepspeed.log")
    rows = jobs(submitted(text))
    print_jobs("SLURM jobs of the 2-process DeepSpeed runs", rows, capsys)
    train = [j for j in rows if j["comment"].startswith("rule_train_")]
    assert len(train) == 2 and all(j["state"] == "COMPLETED" and j["cpus"] == "2" for j in train)
    for method, n, m in (("grpo-n4-m4", 4, 4), ("pods-max_variance-n8-m4", 8, 4)):
        log = Path(f"{run_at(tmp / 'deepspeed/results/logs/train', 'arith', 'cpu-ddp', method, 0)}.log").read_text()
        assert "| 2 processes" in log  # the trainer's start-up line: one run, two processes
        assert "srun --nodes=1 --ntasks=1 --cpus-per-task=2 torchrun --nnodes 1 --nproc_per_node 2" in text
        run = run_at(tmp / "deepspeed/results/runs", "arith", "cpu-ddp", method, 0)
        assert json.loads((run / "summary.json").read_text())["status"] == "complete"
        # each process generates for half the prompts; the step counts the whole batch
        assert all(s["rollouts_generated"] == 2 * n and s["rollouts_trained"] == 2 * m
                   for s in records(run / "steps.jsonl"))
        assert sorted(p.name for p in (run / "checkpoint").glob("state-rank*.json")) == ["state-rank0.json",
                                                                                         "state-rank1.json"]
