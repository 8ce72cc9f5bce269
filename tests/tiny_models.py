"""Tiny causal LMs of the paper's architectures, built from a `transformers` config (no download).

Two layers, hidden size 32: small enough for multi-process CPU tests, real enough that LoRA,
DeepSpeed and the weight transfer to vLLM see the module names of the real models.
"""
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

ARCHITECTURES = {"llama": (LlamaConfig, LlamaForCausalLM), "qwen2": (Qwen2Config, Qwen2ForCausalLM)}


def tiny_lm(arch: str, vocab_size: int, *, kv_heads: int = 4, seed: int = 0):
    config_cls, model_cls = ARCHITECTURES[arch]
    config = config_cls(
        vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=kv_heads, max_position_embeddings=64, tie_word_embeddings=True, pad_token_id=0,
    )
    torch.manual_seed(seed)
    return model_cls(config)


def padded_batch(seed: int, vocab: int, rows: int, prompt: int, completion: int, left_pad, cut):
    """An UpdateBatch of random ids where row i has `left_pad(i)` left-padding tokens and its
    completion ends `cut(i)` tokens early, so that rows differ in length as real rollouts do."""
    from pods.training.update.base import UpdateBatch

    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, vocab, (rows, prompt + completion), generator=g)
    attention = torch.ones_like(ids)
    completion_mask = torch.ones(rows, completion, dtype=torch.long)
    for i in range(rows):
        attention[i, : left_pad(i)] = 0
        end = completion - cut(i)
        completion_mask[i, end:] = 0
        attention[i, prompt + end:] = 0
    return UpdateBatch(ids, attention, completion_mask)
