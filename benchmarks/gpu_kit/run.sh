#!/usr/bin/env bash
# The GPU kit's one command (runs on the GPU machine, no network; about 8 minutes on one H200 with
# the eager rollouts alone, a few more with the compiled ones):
#
#   bash benchmarks/gpu_kit/run.sh OUT          # on the GPU machine, after prepare.sh here
#   bash benchmarks/gpu_kit/run.sh OUT --cpu    # the dry run (CI): tiny shapes, device=cpu
#
#  0. installs the carried wheels (benchmarks/gpu_kit/wheels, from prepare.sh) into a folder
#     outside OUT, with no index (compiled sdists are built there with the image's compiler);
#  1. smoke runs of `pods train` on a tiny warm-started model: hf + torch, hf + DeepSpeed ZeRO-2
#     (one process, NCCL), hf + LoRA (peft), each a few PODS 64 -> 16 steps, phase means printed;
#  2. decoding speed: tokens per second of the eager `hf` engine and of `hf_static` (static KV cache,
#     compiled decode step captured as CUDA graphs) at the paper's sizes (decode_speed.py,
#     OUT/decode-speed.json);
#  3. the measurement: seconds per step by phase of GRPO n=16, PODS 64->16 and GRPO-GA n=64 at the
#     paper's single-GPU sizes (step_costs.py), LoRA and full fine-tuning, with `hf` rollouts into
#     OUT/<hw>-{lora,full}.json, then with `hf_static` rollouts into OUT/<hw>-{lora,full}-static.json;
#  3b. the verl arm: GRPO n=16 and PODS 64->16 through verl's own trainer loop and
#     pods.integrations.verl on one device, a Qwen2.5-0.5B-shaped model (verl_step_costs.py,
#     OUT/<hw>-verl.json). It needs verl importable: the dry run builds scripts/verl_env.sh's
#     environment; on a GPU machine without verl (the image lacks it, and verl's Ray alone is over
#     the carry budget) it says so in one line and the other parts go on;
#  4. `pods project` with those files: our measured step efficiency, and the paper's, over this
#     machine's step-cost ratios (OUT/projection.md).
# Each part has its own time limit, so a slow part leaves the next its time. HARDWARE names the
# machine in the cost files (default: h200).
set -uo pipefail
out=${1:?usage: run.sh OUT [--cpu]}
cpu=${2:-}
repo=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$repo"
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
hw=${HARDWARE:-h200}
if [ "$cpu" = "--cpu" ]; then
    device=cpu; precision=fp32; costs_args=(--arch tiny --device cpu --steps 1 --prompt-tokens 8 --completion-tokens 16)
    decode_args=(--arch tiny --device cpu --prompt-tokens 8 --completion-tokens 16 --repeats 1)
    verl_args=(--arch tiny --device cpu --steps 1 --prompt-tokens 8 --completion-tokens 16)
    smoke_s=300; costs_s=300; static_s=300; decode_s=300; verl_s=300; hw=${HARDWARE:-cpu-dry-run}
else
    device=cuda; precision=bf16; costs_args=(--steps 2); decode_args=()
    # the compiled runs compile the decode step once per arm (a fresh model each) before timing it
    smoke_s=${SMOKE_S:-150}; costs_s=${COSTS_S:-240}; static_s=${STATIC_S:-420}; decode_s=${DECODE_S:-180}
    verl_args=(--steps 2); verl_s=${VERL_S:-300}
fi
py=python3
command -v python3 >/dev/null || py=python

# 0. the carried wheels (not in the dry run: they are for the image's Python; this one has the packages)
if [ "$cpu" != "--cpu" ] && ls benchmarks/gpu_kit/wheels/* >/dev/null 2>&1; then
    site=$(mktemp -d -t pods-gpu-site-XXXXXX)
    $py -m pip install --quiet --no-index --no-deps --no-build-isolation --target "$site" benchmarks/gpu_kit/wheels/* \
        || { echo "run.sh: installing the carried wheels failed" >&2; exit 1; }
    export PYTHONPATH="$site:$repo${PYTHONPATH:+:$PYTHONPATH}"
else
    export PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}"
fi
pods() { $py -m pods.cli "$@"; }
$py - <<'PY' | tee "$out/machine.txt"
import platform, torch, transformers
name = torch.cuda.get_device_name() if torch.cuda.is_available() else platform.processor() or "cpu"
print(f"torch {torch.__version__} | transformers {transformers.__version__} | {name}")
PY

# 1. smoke runs through `pods train`
work=$(mktemp -d -t pods-gpu-kit-XXXXXX)
timeout "$smoke_s" bash -c '
    set -e
    pods() { '"$py"' -m pods.cli "$@"; }
    pods warmstart --no-progress benchmark=arith arch=llama out_dir='"$work"'/base steps=100 eval_items=50 pass_items=10 > '"$work"'/warmstart.log
    common=(benchmark=arith base_model='"$work"'/base device='"$device"' precision='"$precision"' n=64 m=16 rule=max_variance
            prompts_per_step=2 micro_batch=16 max_new_tokens=32 max_steps=3 max_train_time_s=null eval_every_s=null
            eval_every_steps=null eval_items=50 checkpoint_every_s=0)
    pods train --no-progress "${common[@]}" run_dir='"$work"'/torch update_engine=torch
    pods train --no-progress "${common[@]}" run_dir='"$work"'/lora update_engine=lora lora_rank=8 lora_alpha=16 load_in_4bit=false
    if [ '"$device"' = cuda ]; then
        '"$py"' -m torch.distributed.run --nproc_per_node 1 -m pods.cli train --no-progress "${common[@]}" \
            run_dir='"$work"'/deepspeed update_engine=deepspeed deepspeed_zero_stage=2 dist_backend=nccl
    else
        '"$py"' -m torch.distributed.run --nproc_per_node 1 -m pods.cli train --no-progress "${common[@]}" \
            run_dir='"$work"'/deepspeed update_engine=deepspeed deepspeed_zero_stage=2 dist_backend=gloo
    fi
' > "$out/smoke.log" 2>&1
echo "smoke runs: exit $? (log: smoke.log)"
$py - "$work" <<'PY' | tee "$out/smoke.md"
import json, statistics, sys
from pathlib import Path
print("| engine | steps | " + " | ".join(f"{p} s" for p in ("generate", "reward", "select", "logprob", "update")) + " |")
print("|---|---|---|---|---|---|---|")
for engine in ("torch", "lora", "deepspeed"):
    path = Path(sys.argv[1]) / engine / "steps.jsonl"
    steps = [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []
    if not steps:
        print(f"| {engine} | 0 | (did not run: see smoke.log) |||||")
        continue
    timed = steps[1:] or steps  # the first step pays for warm-up
    print(f"| {engine} | {len(steps)} | " + " | ".join(f"{statistics.mean(s[p + '_s'] for s in timed):.3f}"
          for p in ("generate", "reward", "select", "logprob", "update")) + " |")
PY

# 2. tokens per second, eager against compiled decoding
timeout "$decode_s" $py benchmarks/gpu_kit/decode_speed.py "${decode_args[@]}" --out "$out/decode-speed.json" \
    > "$out/decode-speed.log" 2>&1
echo "decode speed: exit $?"; tail -5 "$out/decode-speed.log"

# 3. the step costs at the paper's sizes: eager rollouts (the earlier figures), then compiled ones
for rollout in hf hf_static; do
    for engine in lora torch; do
        name=$([ "$engine" = torch ] && echo full || echo lora)$([ "$rollout" = hf_static ] && echo -static)
        timeout "$([ "$rollout" = hf_static ] && echo "$static_s" || echo "$costs_s")" $py benchmarks/gpu_kit/step_costs.py "${costs_args[@]}" --engine "$engine" \
            --rollout-engine "$rollout" --hardware "$hw-$name" --out "$out/$hw-$name.json" > "$out/costs-$name.log" 2>&1
        echo "step costs ($engine, $rollout rollouts): exit $?"; tail -6 "$out/costs-$name.log"
    done
done

# 3b. the verl arm, in an environment where verl imports (VERL_PYTHON, or the dry run's .venvs/verl)
verl_py=${VERL_PYTHON:-$py}
if [ -z "${VERL_PYTHON:-}" ] && [ "$cpu" = "--cpu" ]; then
    bash scripts/verl_env.sh > "$out/verl-env.log" 2>&1 && verl_py=.venvs/verl/bin/python
fi
if "$verl_py" -c "import verl" > /dev/null 2>&1; then
    timeout "$verl_s" "$verl_py" benchmarks/gpu_kit/verl_step_costs.py "${verl_args[@]}" --hardware "$hw-verl" \
        --out "$out/$hw-verl.json" > "$out/costs-verl.log" 2>&1
    echo "step costs (verl arm): exit $?"; grep -E "^\| |step-cost ratio" "$out/costs-verl.log"
else
    echo "step costs (verl arm): not run: verl does not import with $verl_py (bash scripts/verl_env.sh, then" \
         "VERL_PYTHON=.venvs/verl/bin/python)" | tee "$out/costs-verl.log"
fi

# 4. projections onto this machine
costs=("$out"/"$hw"-*.json)
if [ -e "${costs[0]}" ]; then
    pods project --summary results/summary.csv --paper results/paper/summary.csv --costs "${costs[@]}" \
        --out "$out/projection" > "$out/project.log" 2>&1 && grep -E "^\| |^## " "$out/projection/projection.md" \
        | grep -E "^## |$hw" | head -20
fi
rm -rf "$work"
ls -1 "$out"
if [ "$cpu" = "--cpu" ]; then  # the dry run fails loudly: every part must have run
    ! grep -q "did not run" "$out/smoke.md" || { echo "run.sh --cpu: a smoke run failed (smoke.log)" >&2; exit 1; }
    for f in "$out/$hw-lora.json" "$out/$hw-full.json" "$out/$hw-lora-static.json" "$out/$hw-full-static.json" \
             "$out/$hw-verl.json" "$out/decode-speed.json" "$out/projection/projection.md"; do
        [ -s "$f" ] || { echo "run.sh --cpu: $f is missing" >&2; exit 1; }
    done
    echo "run.sh --cpu: the dry run went through every part"
fi
