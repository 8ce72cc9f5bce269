"""Decoding speed of the rollout engines: tokens per second of `hf` (eager) and `hf_static` (compiled).

    python benchmarks/gpu_kit/decode_speed.py --out decode.json            # on the GPU
    python benchmarks/gpu_kit/decode_speed.py --arch tiny --device cpu     # the CPU dry run

The model and shapes are step_costs.py's (Qwen2.5-3B's architecture, random weights, bf16; one
prompt of 200 tokens, completions forced to exactly 512 tokens), sampled at the rollout widths of
the arms: 16 and 64 rows. Each engine generates once untimed (compilation, CUDA-graph capture),
then `--repeats` timed times with the device synchronised; tokens per second are generated
tokens (rows x completion length) over the seconds of the `generate` call, prefill included.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout, whether or not pods is installed
sys.path.insert(0, str(Path(__file__).resolve().parent))

from step_costs import ARCHS, build, sync  # noqa: E402

from pods.training.rollout import rollout_engine_class  # noqa: E402

ENGINES = ("hf", "hf_static")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arch", choices=sorted(ARCHS), default="qwen2.5-3b")
    p.add_argument("--device", default="cuda")
    p.add_argument("--prompt-tokens", type=int, default=200)
    p.add_argument("--completion-tokens", type=int, default=512)
    p.add_argument("--rows", type=int, nargs="+", default=[16, 64], help="rollouts per prompt")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--out", default=None)
    return p.parse_args()


def main() -> int:
    args = parse_args()
    model = build(args)
    model.eval()
    # pad 0; an EOS id no model emits: every completion runs to exactly --completion-tokens
    ids = SimpleNamespace(pad_token_id=0, eos_token_id=-1)
    prompt = torch.randint(1, ARCHS[args.arch]["vocab_size"], (args.prompt_tokens,),
                           generator=torch.Generator().manual_seed(0)).tolist()
    rows = {}
    for name in ENGINES:
        engine = rollout_engine_class(name)(model=model, tokenizer=ids)
        for n in args.rows:
            def generate(engine=engine):  # bound now: the engine is deleted after its rows
                out = engine.generate([prompt], n, temperature=0.9, max_new_tokens=args.completion_tokens)
                sync(args.device)
                assert out.completion_ids.shape == (n, args.completion_tokens)  # the forced length held
            start = time.perf_counter()
            generate()
            first = time.perf_counter() - start
            seconds = []
            for _ in range(args.repeats):
                start = time.perf_counter()
                generate()
                seconds.append(time.perf_counter() - start)
            s = statistics.median(seconds)
            rows[(name, n)] = {"engine": name, "rows": n, "first_call_s": first, "s": s,
                               "tokens_per_s": n * args.completion_tokens / s}
            print(f"{name} {n} rows: {s:.3f} s per generate, {rows[(name, n)]['tokens_per_s']:.0f} tokens/s "
                  f"(first call {first:.1f} s)", flush=True)
        del engine
    print(f"\n{args.arch}, {args.prompt_tokens} prompt + {args.completion_tokens} completion tokens, "
          f"median of {args.repeats} timed calls after one untimed")
    print("| rows | " + " | ".join(f"{e} tokens/s" for e in ENGINES) + " | hf_static / hf |")
    print("|---|" + "---|" * (len(ENGINES) + 1))
    for n in args.rows:
        rates = [rows[(e, n)]["tokens_per_s"] for e in ENGINES]
        print(f"| {n} | " + " | ".join(f"{r:.0f}" for r in rates) + f" | {rates[1] / rates[0]:.2f} |")
    if args.out:
        device = torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu"
        Path(args.out).write_text(json.dumps({"device": device, "arch": args.arch, "prompt_tokens": args.prompt_tokens,
                                              "completion_tokens": args.completion_tokens, "torch": torch.__version__,
                                              "rows": list(rows.values())}, indent=2) + "\n")
        print(f"-> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
