"""The CPU step against its matmul roofline: one-thread matmul peak, and the FLOP rate of the update and of decoding.

    python benchmarks/roofline.py [--base-model models/arith/base] [--rounds 3]
                                  [--rollout-engines hf hf_static] [--compile-update] [--profile]

In one process, one thread, on the model, prompts and batch of the embedded study (8 prompts of
the task; GRPO generates 16 rollouts per prompt, PODS 64; both train 128):

1. **Peak**: the matrix products of a linear layer at every weight shape of the model: with M =
   the update's rows (completion positions of the 128 trained rollouts) the forward `addmm` and
   the backward's two `mm` (transposed operands, as autograd runs them); with M = each decode
   batch (128 and 512 rows) the forward. The peak is the best rate over these: what one core does
   on the matrix products this model has, the ceiling of both phases.
2. **Update**: the `torch` update engine's optimiser step on the 128 trained rollouts (forward,
   backward, clipping, AdamW), and, with `--compile-update`, the same step with `compile_update`.
3. **Decode**: one `generate` call of each rollout engine (prefill, then one token per row and
   step until every row has stopped or 32 tokens), GRPO and PODS shapes.

Both phases run three times: "before", as the studies trained before the faster step ran (config/
ablations.yaml, alternatives.yaml and decide.yaml pin it: the model's own eight-operation GELU, the
update's rows in rollout order, the KV cache concatenated at every token, torch.multinomial, sdpa
attention); "trainer", with the trainer's defaults (the fused GELU, length-bucketed
micro-batches, the KV cache grown 8 positions at a time, inverse-CDF sampling, eager attention on
a CPU); and "trainer, sdpa", the defaults with torch's sdpa attention, which shows what the
attention kernel alone changes.

How the FLOPs are counted: `torch.utils.flop_counter.FlopCounterMode` (torch's own counter) records
the matrix products each phase dispatches (mm, addmm, bmm and attention; this script registers
torch's attention formula for the CPU flash-attention kernel, which the counter does not know)
with the shapes actually run, in an untimed eager pass over the same inputs. The elementwise work
(activations, norms, softmax, sampling, the optimiser) counts zero: it is the overhead a roofline
fraction measures. Padding and rows that keep decoding after their EOS are counted, since they are
executed; the column `real tokens` gives the share of the positions run that are real tokens. A
compiled variant runs the same products as its eager pass (its count comes from an eager pass of
the same engine with the same shapes). Each timing is the fastest of `--rounds` interleaved
repetitions, with the load average printed beside it: other processes on the machine slow every
row, so compare rows of one run, not of two. `--profile` adds where the time of the eager update
and of the default decode goes, by operator (torch.profiler): what keeps a phase off the peak.
"""
from __future__ import annotations

import argparse
import copy
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import torch  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode, register_flop_formula, sdpa_backward_flop_count, sdpa_flop_count  # noqa: E402

from pods.training.batches import UpdateBatch  # noqa: E402
from pods.training.config import TrainConfig  # noqa: E402
from pods.training.models import fuse_activations, load_policy  # noqa: E402
from pods.training.rollout import rollout_engine_class  # noqa: E402
from pods.training.rollout.base import encode_prompts  # noqa: E402
from pods.training.tasks import get_task  # noqa: E402
from pods.training.update import make_update_engine  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from step_time import ensure_base  # noqa: E402

ARMS = {"GRPO n=16": 16, "PODS n=64": 64}  # decode shapes: rollouts per prompt
TRAINED = 16  # rollouts per prompt in the update (both arms train 8 x 16)


@register_flop_formula(torch.ops.aten._scaled_dot_product_flash_attention_for_cpu)
def _cpu_sdpa_flop(query, key, value, *args, out_shape=None, **kwargs) -> int:
    return sdpa_flop_count(query, key, value)  # shapes: the counter passes them in place of tensors


@register_flop_formula(torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward)
def _cpu_sdpa_backward_flop(grad_out, query, key, value, *args, out_shape=None, **kwargs) -> int:
    return sdpa_backward_flop_count(grad_out, query, key, value)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base-model", default="models/arith/base", help="model folder (built untrained if missing)")
    p.add_argument("--benchmark", default="arith")
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--rounds", type=int, default=3, help="interleaved repetitions; the fastest of each is kept")
    p.add_argument("--rollout-engines", nargs="+", default=["hf"], help="rollout engines to measure (hf, hf_static)")
    p.add_argument("--compile-update", action="store_true", help="also measure the update with compile_update")
    p.add_argument("--profile", action="store_true", help="print the operators that take the time (torch.profiler)")
    return p.parse_args()


def load() -> str:
    return "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def fastest(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def counted(fn) -> int:
    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


def profile(label: str, fn, rows: int = 12) -> None:
    """The operators taking the most self time in `fn`, as shares of its total."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    events = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    total = sum(e.self_cpu_time_total for e in events)
    print(f"\n## Where the time goes: {label} ({total / 1e3:.0f} ms profiled, {load()})")
    print("| operator | calls | ms | share |")
    print("|---|---|---|---|")
    for e in events[:rows]:
        print(f"| {e.key} | {e.count} | {e.self_cpu_time_total / 1e3:.1f} | {e.self_cpu_time_total / total:.0%} |")


def linear_shapes(model) -> list[tuple[int, int]]:
    """(in, out) of every matrix product weight of the model (Linear, GPT-2's Conv1D, the tied head)."""
    shapes = set()
    for module in model.modules():
        weight = getattr(module, "weight", None)
        if weight is None or weight.dim() != 2 or isinstance(module, torch.nn.Embedding):
            continue
        k, n = (weight.shape[1], weight.shape[0]) if isinstance(module, torch.nn.Linear) else tuple(weight.shape)
        shapes.add((int(k), int(n)))
    return sorted(shapes)


# The products of a linear layer y = x w + b (x [M, K], w [K, N]): the forward, and the two of its
# backward as autograd runs them (transposed operands are strided views, as there).
PRODUCTS = {
    "forward": lambda x, w, g, b: torch.addmm(b, x, w),
    "backward dx": lambda x, w, g, b: torch.mm(g, w.t()),
    "backward dw": lambda x, w, g, b: torch.mm(x.t(), g),
}


def matmul_rates(shapes, rows: dict[str, tuple[int, tuple[str, ...]]], repeats: int) -> dict[tuple, float]:
    """GFLOP/s of every product of `PRODUCTS` named in `rows` (label -> (M, products)) at every (K, N)."""
    rates = {}
    for label, (m, products) in rows.items():
        for product in products:
            for k, n in shapes:
                x, w, g, bias = torch.randn(m, k), torch.randn(k, n), torch.randn(m, n), torch.randn(n)
                iters = max(1, int(2e8 / (2 * m * k * n)))  # ~0.2 GFLOP per timing

                def run():
                    for _ in range(iters):
                        PRODUCTS[product](x, w, g, bias)

                run()
                rates[(label, product, k, n)] = 2 * m * k * n * iters / fastest(run, repeats) / 1e9
    return rates


def main() -> int:
    args = parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        base, warm = ensure_base(args.base_model, Path(tmp))
        model, tokenizer = load_policy(base)
    task = get_task(args.benchmark)
    problems = task.train_problems(0)[: args.prompts]
    prompts = encode_prompts(tokenizer, [task.render_prompt(p, tokenizer) for p in problems])
    print(f"model: {base if warm else 'untrained default shape (no warm start found)'}; {args.prompts} prompts, "
          f"max {args.max_new_tokens} new tokens, 1 thread, fastest of {args.rounds} rounds; torch "
          f"{torch.__version__}, "
          f"CPU kernels {torch.backends.cpu.get_cpu_capability()}")
    print(f"start: {load()}")

    # the update's batch: 16 sampled rollouts of each prompt, as a GRPO step trains them
    sampler = rollout_engine_class("hf")(model=model, tokenizer=tokenizer)
    torch.manual_seed(0)
    rollouts = sampler.generate(prompts, TRAINED, temperature=1.0, max_new_tokens=args.max_new_tokens)
    batch = UpdateBatch.from_rollouts(rollouts, torch.arange(len(rollouts)), tokenizer.pad_token_id)
    advantages = torch.randn(len(batch), generator=torch.Generator().manual_seed(0))
    update_rows = len(batch) * batch.completion_len  # positions of the shared-prompt pass's largest products

    # 1. the peak at the model's shapes
    shapes = linear_shapes(model)
    rows = {"update": (update_rows, tuple(PRODUCTS)), "decode 128": (args.prompts * 16, ("forward",)),
            "decode 512": (args.prompts * 64, ("forward",))}
    rates = matmul_rates(shapes, rows, repeats=5 * args.rounds)
    peak_key = max(rates, key=rates.get)
    peak = rates[peak_key]
    print(f"\n## One-thread matmul rates at the model's shapes, GFLOP/s ({load()})")
    print("| M, product \\ K x N | " + " | ".join(f"{k}x{n}" for k, n in shapes) + " |")
    print("|---|" + "---|" * len(shapes))
    for label, (m, products) in rows.items():
        for product in products:
            print(f"| {label} (M={m}), {product} | "
                  + " | ".join(f"{rates[(label, product, k, n)]:.1f}" for k, n in shapes) + " |")
    label, product, k, n = peak_key
    print(f"peak: {peak:.1f} GFLOP/s ({label} {product}, M={rows[label][0]}, K={k}, N={n})")

    # 2. the update, 3. decoding: FLOPs counted once per variant, times the fastest of the rounds.
    # "before": the model's own GELU, the update's rows in rollout order, the concatenating KV cache,
    # torch.multinomial and sdpa attention (what the earlier studies pin); "trainer": the trainer's
    # defaults, the fused GELU, length buckets, the chunked KV cache, inverse-CDF sampling and the
    # attention TrainConfig picks on a CPU (eager).
    pinned = {"fused_activation": False, "length_buckets": False, "kv_cache_chunk": 1, "sampling": "multinomial",
              "attn_implementation": "sdpa"}
    # "trainer, sdpa": the defaults but torch's sdpa attention, to show what eager attention alone buys
    settings = {"before": TrainConfig(benchmark=args.benchmark, **pinned),
                "trainer": TrainConfig(benchmark=args.benchmark),
                "trainer, sdpa": TrainConfig(benchmark=args.benchmark, attn_implementation="sdpa")}
    policies = {"before": model}
    for policy in ("trainer", "trainer, sdpa"):
        policies[policy] = copy.deepcopy(model)
        fuse_activations(policies[policy])
        policies[policy].set_attn_implementation(settings[policy].attention())

    TRAINER_UPDATE = "update, trainer (fused GELU, eager attention, length buckets)"

    def updater(policy: str, *, buckets: bool, compile_update: bool = False):
        config = TrainConfig(benchmark=args.benchmark, micro_batch=len(batch), lr=1e-6, compile_update=compile_update,
                             length_buckets=buckets, fused_activation=policy != "before")
        return make_update_engine("torch", model=copy.deepcopy(policies[policy]), config=config)

    updates = {"update, before (model's GELU, rollout order)": updater("before", buckets=False),
               TRAINER_UPDATE: updater("trainer", buckets=True),
               "update, trainer with sdpa attention": updater("trainer, sdpa", buckets=True)}
    if args.compile_update:
        updates["update, trainer + compile_update"] = updater("trainer", buckets=True, compile_update=True)
    update_flops, update_positions = {}, {}
    for label, engine in updates.items():
        if "compile_update" in label:  # count the products of the same step run eagerly
            update_flops[label] = update_flops[TRAINER_UPDATE]
        else:
            update_flops[label] = counted(lambda: engine.step(batch, advantages))
        update_positions[label] = sum(len(mb) * mb.completion_len for _, mb in engine._chunks(batch))
    engines = {(policy, name): rollout_engine_class(name)(model=policies[policy], tokenizer=tokenizer,
                                                          config=settings[policy])
               for policy in policies for name in args.rollout_engines if policy == "trainer" or name == "hf"}

    def decode(engine, n, seed=0):
        torch.manual_seed(seed)
        return engine.generate(prompts, n, temperature=1.0, max_new_tokens=args.max_new_tokens)

    decode_flops, useful, tokens = {}, {}, {}
    for (policy, name), engine in engines.items():
        eager = engine
        if getattr(engine, "compile", False):  # count the products of the same engine run eagerly
            eager = type(engine)(model=policies[policy], tokenizer=tokenizer, config=settings[policy], compile=False)
        for arm, n in ARMS.items():
            decode_flops[(policy, name, arm)] = counted(lambda: decode(eager, n))
            rows_run = []  # rows of every one-token decoding call: the positions decoded
            hook = policies[policy].register_forward_pre_hook(
                lambda module, args, kwargs: rows_run.append(kwargs["input_ids"].shape[0])
                if kwargs["input_ids"].shape[1] == 1 else None, with_kwargs=True)
            try:
                made = decode(eager, n)
            finally:
                hook.remove()
            tokens[(policy, name, arm)] = made.num_tokens
            # the first token of every row comes from the prefill, each later one from a decoding call
            useful[(policy, name, arm)] = made.num_tokens / (len(made) + sum(rows_run))
    for step in updates.values():  # warm-up (compilation) off the clock
        step.step(batch, advantages)
    for engine in engines.values():
        for n in ARMS.values():
            decode(engine, n)

    times: dict = {}
    for _ in range(args.rounds):
        for label, step in updates.items():
            times[label] = min(times.get(label, float("inf")), fastest(lambda: step.step(batch, advantages), 1))
        for key, engine in engines.items():
            for arm, n in ARMS.items():
                times[(*key, arm)] = min(times.get((*key, arm), float("inf")), fastest(lambda: decode(engine, n), 1))

    print(f"\n## Achieved rates ({load()})")
    print("| phase | s | GFLOP | GFLOP/s | of peak | real tokens | tokens/s |")
    print("|---|---|---|---|---|---|---|")
    for label in updates:
        t, flops, positions = times[label], update_flops[label], update_positions[label]
        print(f"| {label}, {len(batch)} rollouts, {positions} positions | {t:.4f} | {flops / 1e9:.2f} | "
              f"{flops / t / 1e9:.1f} | {flops / t / 1e9 / peak:.0%} | {batch.num_tokens / positions:.0%} | "
              f"{batch.num_tokens / t:.0f} |")
    for key in engines:
        for arm in ARMS:
            policy, name = key
            flops, t = decode_flops[(*key, arm)], times[(*key, arm)]
            label = f"decode {arm}, {policy} ({name})"
            print(f"| {label} | {t:.4f} | {flops / 1e9:.2f} | {flops / t / 1e9:.1f} | {flops / t / 1e9 / peak:.0%} | "
                  f"{useful[(*key, arm)]:.0%} | {tokens[(*key, arm)] / t:.0f} |")
    if args.profile:
        default = updates[TRAINER_UPDATE]
        profile("update, trainer", lambda: default.step(batch, advantages))
        for (policy, name), engine in engines.items():
            if policy == "trainer":
                profile(f"decode PODS n=64, trainer ({name})", lambda: decode(engine, ARMS["PODS n=64"]))
    print("\nof peak: counted matrix-product FLOPs / phase seconds / peak. real tokens: the share of the positions "
          "run that are real tokens (update: completion tokens over rows x completion length; decode: generated "
          "tokens over the rows of every decoding step, finished rows still in the batch included). tokens/s: "
          "completion tokens trained, or generated, per second: compare engines by it, since a variant that runs "
          "more positions can reach a larger share of the peak and still be slower.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
