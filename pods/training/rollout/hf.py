"""`hf` rollout engine: batched sampling with a KV cache from the training policy object itself.

Each distinct prompt is prefilled once and its cache repeated n times, as vLLM's prefix caching
would share it; rows that have emitted EOS are dropped from the batch (and the cache) as they
accumulate, so long-tailed length distributions do not keep paying for finished rows.

The cache grows `kv_cache_chunk` positions at a time (`ChunkedCache`): each step writes its keys
and values in place and attention reads the whole buffer, the positions not yet written masked.
`DynamicCache` (chunk 1) concatenates at every step, allocating and copying the whole cache: a fifth
of the PODS decode on the embedded CPU model. Reading only the filled positions of a preallocated
buffer (views that are not contiguous) was slower still: CPU attention over such keys costs more
than the copy saves. `hf_static` (pods.training.rollout.hf_static) is the static-shape, compiled
variant, for GPUs.
"""
from __future__ import annotations

import functools

import torch
import torch.distributed as dist
from transformers import DynamicCache
from transformers.cache_utils import Cache, DynamicLayer

from pods.training.batches import Rollouts
from pods.training.config import TrainConfig
from pods.training.models import CACHE
from pods.training.rollout.base import RolloutEngine

# Compact the running batch once this share of its rows has finished: each compaction copies
# the cache, so doing it for every finished row would cost more than it saves.
COMPACT_FRACTION = 0.25


class ChunkedLayer(DynamicLayer):
    """A layer's keys and values in a buffer that grows `chunk` positions at a time.

    A `DynamicLayer` concatenates at every decoding step, allocating and copying the whole cache
    each time (a fifth of decoding's time at the embedded PODS shapes). Here each step writes its
    position in place; the buffer is copied into a larger one only every `chunk` steps. Attention
    reads the whole buffer, contiguous, and the positions not yet written are masked: the mask
    sizes say the buffer's length, and the 2D attention mask, shorter than it, is padded with zeros
    (transformers' `prepare_padding_mask`), besides causality hiding every position past the query.
    """

    def __init__(self, chunk: int):
        super().__init__()
        self.chunk = chunk
        self.written = 0

    def _capacity(self, length: int) -> int:
        return -(-length // self.chunk) * self.chunk

    def update(self, key_states, value_states, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        end = self.written + key_states.shape[-2]
        if self.keys.numel() == 0 or end > self.keys.shape[-2]:  # grow: the one copy in `chunk` steps
            shape = (*key_states.shape[:2], self._capacity(end), key_states.shape[-1])
            keys, values = key_states.new_empty(shape), value_states.new_empty(shape)
            if self.written:
                keys[:, :, : self.written] = self.keys[:, :, : self.written]
                values[:, :, : self.written] = self.values[:, :, : self.written]
            # the unwritten tail is masked, but a masked score times a NaN left in memory is NaN
            keys[:, :, self.written:] = 0
            values[:, :, self.written:] = 0
            self.keys, self.values = keys, values
        self.keys[:, :, self.written:end] = key_states
        self.values[:, :, self.written:end] = value_states
        self.written = end
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.written

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self._capacity(self.written + query_length), 0

    def reset(self) -> None:
        self.written = 0
        super().reset()


class ChunkedCache(DynamicCache):
    """A `DynamicCache` of `ChunkedLayer`s, one per layer of the model from the start (transformers sizes
    the mask of a layer it has not seen yet by the query alone)."""

    def __init__(self, chunk: int, num_layers: int):
        Cache.__init__(self, layers=[ChunkedLayer(chunk) for _ in range(num_layers)])


class HFRolloutEngine(RolloutEngine):
    """Sampling with any `transformers` causal LM (GPT-2, Llama, ...) on CPU or GPU.

    Args:
        model: the policy (shared with the update engine, so weights are always current).
        tokenizer: supplies `pad_token_id` and `eos_token_id`.
        config: a TrainConfig (kv_cache_chunk, sampling, and the update engine, for ZeRO-3's
            lockstep); None (tests, benchmarks): the trainer's defaults.
    """

    def __init__(self, *, model, tokenizer, config=None):
        self.model = model
        cfg = config if config is not None else TrainConfig()
        # ZeRO-3 gathers the sharded weights inside every forward, a collective: all processes
        # must then make the same number of decoding calls, so none stops before all are done.
        self.lockstep = (
            cfg.update_engine == "deepspeed" and cfg.deepspeed_zero_stage == 3
            and dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
        )
        self.chunk, self.sampling = cfg.kv_cache_chunk, cfg.sampling
        self.pad_id = tokenizer.pad_token_id
        self.eos_id = tokenizer.eos_token_id
        if self.pad_id is None or self.eos_id is None:
            raise ValueError("the tokenizer needs pad_token_id and eos_token_id for batched sampling")

    def sync_weights(self, model) -> None:
        self.model = model

    @staticmethod
    def _everyone(flag: bool, device) -> bool:
        """True when `flag` is true on every process."""
        pending = torch.tensor([0.0 if flag else 1.0], device=device)
        dist.all_reduce(pending)
        return pending.item() == 0

    @torch.no_grad()  # not inference_mode: the sampled ids are later inputs of a graph with grad
    def generate(self, prompt_ids, n, *, temperature, max_new_tokens, greedy=False, seed=None) -> Rollouts:
        if not prompt_ids or any(len(p) == 0 for p in prompt_ids):
            raise ValueError("generate needs at least one prompt and no empty prompt")
        model = self.model
        device = next(model.parameters()).device
        was_training = model.training
        model.eval()
        generator = None
        if seed is not None and not greedy:
            generator = torch.Generator(device=device).manual_seed(seed)
        sample = functools.partial(choose, greedy=greedy, temperature=temperature, generator=generator,
                                   sampling=self.sampling)
        try:
            cache, logits, attention = self._prefill(model, prompt_ids, n, device)
            tokens, mask = self._decode(model, cache, logits, attention, sample, max_new_tokens)
        finally:
            model.train(was_training)
        return cut_after_eos(prompt_ids, n, tokens, mask, self.eos_id, self.pad_id)

    def _prefill(self, model, prompt_ids, n, device):
        """Each prompt once, left-padded: its cache and last logits repeated n times, and the attention mask."""
        G = len(prompt_ids)
        width = max(len(p) for p in prompt_ids)
        input_ids = torch.full((G, width), self.pad_id, dtype=torch.long, device=device)
        attention = torch.zeros((G, width), dtype=torch.long, device=device)
        for g, p in enumerate(prompt_ids):  # left padding: every prompt ends in the last column
            input_ids[g, width - len(p):] = torch.tensor(p, dtype=torch.long, device=device)
            attention[g, width - len(p):] = 1
        positions = (attention.cumsum(dim=1) - 1).clamp(min=0)

        cache = DynamicCache() if self.chunk <= 1 else ChunkedCache(self.chunk, model.config.num_hidden_layers)
        out = model(input_ids=input_ids, attention_mask=attention, position_ids=positions,
                    use_cache=True, logits_to_keep=1, **{CACHE: cache})
        cache = getattr(out, CACHE)
        logits = out.logits[:, -1, :].float()
        if not torch.isfinite(logits).all():  # sampling would fail on it, greedy would decode garbage
            raise FloatingPointError("the policy's logits are not finite (its weights have diverged)")
        if n > 1:  # share each prompt's prefill among its n rows
            cache.batch_repeat_interleave(n)
            logits = logits.repeat_interleave(n, dim=0)
            attention = attention.repeat_interleave(n, dim=0)
        return cache, logits, attention

    def _decode(self, model, cache, logits, attention, sample, max_new_tokens):
        """Tokens and mask `[B, max_new_tokens]` sampled one position at a time after the prefill."""
        device = logits.device
        next_pos = attention.sum(dim=1)  # [B] position of the next token
        B = logits.shape[0]
        tokens = torch.full((B, max_new_tokens), self.pad_id, dtype=torch.long, device=device)
        mask = torch.zeros((B, max_new_tokens), dtype=torch.long, device=device)
        active = torch.arange(B, device=device)  # original row of each running row
        finished = torch.zeros(B, dtype=torch.bool, device=device)  # per running row
        for t in range(max_new_tokens):
            chosen = sample(logits)
            # a finished row that is still in the batch keeps sampling; its tokens are cut below
            tokens[active, t] = chosen
            mask[active, t] = 1
            finished = finished | (chosen == self.eos_id)
            stop = t == max_new_tokens - 1 or bool(finished.all())
            if self.lockstep:
                stop = self._everyone(stop, device)
            if stop:
                break
            if finished.float().mean() >= COMPACT_FRACTION and not finished.all():
                keep = (~finished).nonzero().squeeze(1)
                cache.batch_select_indices(keep)
                active, chosen, attention, next_pos = active[keep], chosen[keep], attention[keep], next_pos[keep]
                finished = finished[keep]
            attention = torch.cat([attention, torch.ones_like(attention[:, :1])], dim=1)
            out = model(input_ids=chosen[:, None], attention_mask=attention, position_ids=next_pos[:, None],
                        use_cache=True, **{CACHE: cache})
            cache = getattr(out, CACHE)
            logits = out.logits[:, -1, :].float()
            next_pos = next_pos + 1
        return tokens, mask


def choose(logits: torch.Tensor, *, greedy: bool, temperature: float, generator, sampling: str) -> torch.Tensor:
    """The next token of every row: argmax, or a draw from softmax(logits / temperature).

    `sampling` is how the draw is made (config key `sampling`): `inverse_cdf`, one uniform number per
    row looked up in the cumulative probabilities; `multinomial`, `torch.multinomial`, which on a CPU
    draws an exponential variate per vocabulary entry (8x slower at the embedded PODS shapes, [512, 100]).
    The same distribution, different draws from the same seed.
    """
    if greedy:
        return logits.argmax(dim=-1)
    probs = torch.softmax(logits / temperature, dim=-1)
    if sampling == "multinomial":
        return torch.multinomial(probs, 1, generator=generator).squeeze(1)
    cdf = probs.double().cumsum(dim=-1)  # float64: a vocabulary of 150k keeps its tail
    u = torch.rand(len(cdf), 1, generator=generator, dtype=torch.float64, device=cdf.device) * cdf[:, -1:]
    # token i is drawn when cdf[i-1] <= u < cdf[i]: one of zero probability never is
    return torch.searchsorted(cdf, u, right=True).squeeze(1).clamp_(max=probs.shape[-1] - 1)


def cut_after_eos(prompt_ids, n, tokens, mask, eos_id, pad_id) -> Rollouts:
    """The rollouts, every row cut after its first EOS (rows still in the batch kept sampling)."""
    device = tokens.device
    is_eos = (tokens == eos_id) & (mask == 1)
    after_eos = (is_eos.long().cumsum(dim=1) - is_eos.long()) > 0
    mask = mask.masked_fill(after_eos, 0)
    tokens = tokens.masked_fill(mask == 0, pad_id)
    T = int(mask.sum(dim=0).nonzero().max()) + 1 if mask.any() else 1
    group = torch.arange(len(prompt_ids), device=device).repeat_interleave(n)
    return Rollouts(
        prompt_ids=[list(p) for p in prompt_ids],
        completion_ids=tokens[:, :T].cpu(),
        completion_mask=mask[:, :T].cpu(),
        group=group.cpu(),
        n=n,
    )
