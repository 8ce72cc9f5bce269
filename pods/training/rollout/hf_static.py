"""`hf_static` rollout engine: the `hf` engine's sampling with a static KV cache and a compiled decode step.

A batched inference engine decodes with the cache allocated once and a decode step whose shapes
do not change from token to token, so that the step can be compiled (fused kernels on a CPU,
`torch.compile`'s inductor) and, on a GPU, captured as a CUDA graph (mode `reduce-overhead`):
the step then costs the hardware's time, not one Python dispatch per operation. The eager `hf`
engine grows its cache by one position per token, so every step has new shapes.

Here the prompts are prefilled as in `hf` (each once, left-padded) and copied into a
`transformers.StaticCache` of `capacity` positions (the prompt width plus `max_new_tokens`,
rounded up to `CAPACITY_STEP` so that prompts of nearby widths share one compiled graph); the
engine keeps one cache per shape for the next calls, so the compiled step is reused, not
recompiled. Each decode step attends over the whole capacity under an additive mask that hides the
padding and the positions not yet written. Rows that have emitted EOS stay in the batch (fixed
shapes; their tokens are cut afterwards) and decoding stops when every row has.

Attention over the full capacity sums the same terms in another order, so logits differ from the
`hf` engine's in the last bits: greedy tokens are the same on the tested models, sampled tokens
may differ, and with them the random draws (`hf` drops finished rows, so its later draws fall on
other rows). That is why this engine is an option (`rollout_engine: hf_static`) and not the
default, under which the committed runs were made. On the embedded CPU model it does not pay:
attention over the padded capacity and the finished rows kept in the batch cost more than the
compiled step saves (benchmarks/roofline.py); it is meant for a GPU, where an eager decode step
is bound by launch latency.
"""
from __future__ import annotations

import math

import torch
from transformers import StaticCache

from pods.training.models import CACHE
from pods.training.rollout.hf import HFRolloutEngine

# The cache length is rounded up to a multiple of this, so the compiled step sees few shapes.
CAPACITY_STEP = 16


def decode_step(model, ids, positions, mask, cache) -> torch.Tensor:
    """Float logits `[B, V]` of one new token per row; the cache is written in place."""
    out = model(input_ids=ids, position_ids=positions, attention_mask=mask, use_cache=True, **{CACHE: cache})
    return out.logits[:, -1, :].float()


class StaticHFRolloutEngine(HFRolloutEngine):
    """The `hf` engine with a static cache and `torch.compile`d decoding.

    Args:
        model, tokenizer, config: as for `HFRolloutEngine`.
        compile: compile the decode step (False: the same static-shape step, eager; for tests).
    """

    def __init__(self, *, model, tokenizer, config=None, compile: bool = True):
        super().__init__(model=model, tokenizer=tokenizer, config=config)
        if self.lockstep:
            raise ValueError("rollout_engine 'hf_static' does not run under DeepSpeed ZeRO-3 (use 'hf')")
        self.compile = compile
        self.chunk = 1  # the prefill's cache is copied into the static one position for position
        self._step = None
        self._caches: dict[tuple, StaticCache] = {}

    def _compiled_step(self, device: torch.device):
        if self._step is None:
            if not self.compile:
                self._step = decode_step
            else:
                # CUDA: the step captured as a CUDA graph (one per shape); CPU: fused C++ kernels
                mode = "reduce-overhead" if device.type == "cuda" else None
                self._step = torch.compile(decode_step, mode=mode)
        return self._step

    def _static_cache(self, model, batch: int, capacity: int, dtype) -> StaticCache:
        """The engine's static cache for this shape, emptied. One is kept per shape (training's and the
        evaluation's batches alternate), so each compiled (captured) step keeps reading the same
        tensors and is reused rather than recompiled or captured again."""
        shape = (id(model), batch, capacity, dtype)
        if shape not in self._caches:
            self._caches[shape] = StaticCache(config=model.config, max_cache_len=capacity)
        else:
            self._caches[shape].reset()
        return self._caches[shape]

    def _decode(self, model, cache, logits, attention, sample, max_new_tokens):
        device, dtype = logits.device, next(model.parameters()).dtype
        B, width = attention.shape
        capacity = math.ceil((width + max_new_tokens) / CAPACITY_STEP) * CAPACITY_STEP
        static = self._static_cache(model, B, capacity, dtype)
        for i, layer in enumerate(cache.layers):  # the prefill's keys and values, positions [0, width)
            static.update(layer.keys, layer.values, i)
        # additive attention mask over the cache: 0 on the prompt and on each generated position once written
        visible = torch.full((B, 1, 1, capacity), torch.finfo(dtype).min, dtype=dtype, device=device)
        visible[:, 0, 0, :width].masked_fill_(attention.bool(), 0.0)
        next_pos = attention.sum(dim=1, keepdim=True)  # [B, 1] position id of the next token
        step = self._compiled_step(device)

        tokens = torch.full((B, max_new_tokens), self.pad_id, dtype=torch.long, device=device)
        finished = torch.zeros(B, dtype=torch.bool, device=device)
        for t in range(max_new_tokens):
            chosen = sample(logits)
            tokens[:, t] = chosen
            finished |= chosen == self.eos_id
            if t == max_new_tokens - 1 or bool(finished.all()):
                break
            visible[:, 0, 0, width + t] = 0.0
            # every row stays in the batch (fixed shapes); finished rows' tokens are cut afterwards
            logits = step(model, chosen[:, None], next_pos, visible, static)
            next_pos = next_pos + 1
        mask = torch.zeros_like(tokens)
        mask[:, : t + 1] = 1
        return tokens, mask
