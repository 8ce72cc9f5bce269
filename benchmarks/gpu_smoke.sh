#!/usr/bin/env bash
# GPU smoke run: a few PODS steps (n = 64 -> m = 16, max-variance) of the embedded tiny policy on
# a CUDA machine, through the same `pods train` as every run, once per engine combination:
#   1. hf rollouts + torch update            (one process)
#   2. hf rollouts + deepspeed ZeRO-2 update (one process per GPU, the deepspeed launcher)
#   3. vllm rollouts + torch update          (only when vllm is installed)
# and prints the mean phase times per step (generate, reward, select, logprob, update), the first
# step left out (CUDA warm-up, kernel compilation).
#
#   bash benchmarks/gpu_smoke.sh                 # every GPU of the machine
#   NGPU=2 STEPS=10 bash benchmarks/gpu_smoke.sh
#
# Outputs go to $WORK (default: a fresh temporary folder), never to results/.
set -euo pipefail

if ! command -v nvidia-smi >/dev/null 2>&1 || ! python -c "import torch, sys; sys.exit(not torch.cuda.is_available())"; then
    echo "gpu_smoke.sh: needs a CUDA machine (no GPU visible to torch)" >&2
    exit 2
fi
NGPU=${NGPU:-$(nvidia-smi -L | wc -l)}
STEPS=${STEPS:-6}
WORK=${WORK:-$(mktemp -d -t pods-gpu-smoke-XXXXXX)}
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
echo "gpu_smoke: $NGPU GPU(s), $STEPS steps per run, outputs in $WORK"

# The tiny base model: a short supervised warm start of the embedded `arith` benchmark (CPU, seconds).
pods warmstart --no-progress benchmark=arith out_dir="$WORK/base" steps=200 eval_items=100 pass_items=20

# 8 prompts x 16 kept rollouts = 128 rows per step: splits evenly over 1, 2, 4 or 8 processes.
COMMON=(
    benchmark=arith base_model="$WORK/base" device=cuda precision=bf16 num_threads=4
    n=64 m=16 rule=max_variance prompts_per_step=8 micro_batch=16 max_new_tokens=32
    max_steps="$STEPS" max_train_time_s=null eval_every_s=null eval_every_steps=null eval_items=100
    checkpoint_every_s=0
)

run() {  # run NAME COMMAND...
    local name=$1
    shift
    echo "== $name"
    local start=$SECONDS
    "$@" "${COMMON[@]}" run_dir="$WORK/runs/$name" > "$WORK/$name.log" 2>&1 || {
        echo "gpu_smoke: $name failed, last lines of $WORK/$name.log:" >&2
        tail -n 30 "$WORK/$name.log" >&2
        exit 1
    }
    echo "   done in $((SECONDS - start)) s"
}

run hf-torch pods train --no-progress rollout_engine=hf update_engine=torch
run hf-deepspeed deepspeed --num_gpus "$NGPU" --no_local_rank --module pods.cli train --no-progress \
    rollout_engine=hf update_engine=deepspeed deepspeed_zero_stage=2
if python -c "import vllm" >/dev/null 2>&1; then
    run vllm-torch pods train --no-progress rollout_engine=vllm update_engine=torch \
        vllm_gpu_memory_utilization=0.3 vllm_enforce_eager=true
else
    echo "== vllm-torch skipped: vllm is not installed"
fi

python - "$WORK/runs" <<'PY'
import json, statistics, sys
from pathlib import Path

phases = ["generate_s", "reward_s", "select_s", "logprob_s", "update_s", "step_s"]
print(f"\n{'run':<14}" + "".join(f"{p[:-2]:>10}" for p in phases) + "   (mean s/step, first step excluded)")
for run in sorted(Path(sys.argv[1]).iterdir()):
    steps = [json.loads(line) for line in (run / "steps.jsonl").read_text().splitlines()][1:]
    if not steps:
        continue
    print(f"{run.name:<14}" + "".join(f"{statistics.mean(s[p] for s in steps):>10.3f}" for p in phases))
PY
