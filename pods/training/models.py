"""Policies: a tiny local character-level model for the CPU default, or any local HF model folder.

Both kinds are saved with `save_pretrained` (model + tokenizer) and loaded back through
`load_policy`, so the trainer never needs to know which one it has.
"""
from __future__ import annotations

import dataclasses
import math
import string
from pathlib import Path

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedModel,
    PreTrainedTokenizerFast,
)
from transformers.modeling_outputs import CausalLMOutputWithPast

# The keyword (and output field) of the key/value cache: `cache` in current transformers,
# `past_key_values` before the rename, which is what vLLM's CPU build pins (transformers 5.19).
# Every caller that passes a cache uses this name (the hf rollout engine, the torch update engine).
CACHE = "cache" if "cache" in {f.name for f in dataclasses.fields(CausalLMOutputWithPast)} else "past_key_values"

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
# Printable ASCII: covers the embedded tasks and leaves room for worded prompts at no real cost
# (an embedding row per character).
DEFAULT_ALPHABET = string.digits + string.ascii_letters + string.punctuation + " \n"


def build_char_tokenizer(alphabet: str = DEFAULT_ALPHABET) -> PreTrainedTokenizerFast:
    """One token per character, `<bos>` prepended to every encoded text, `<eos>` to end completions.

    Built with the `tokenizers` library (word-level model over single characters) and wrapped in
    `PreTrainedTokenizerFast`, so it saves, loads and batches like any Hugging Face tokenizer.
    """
    chars = list(dict.fromkeys(alphabet))
    vocab = {tok: i for i, tok in enumerate([PAD, BOS, EOS, UNK] + chars)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()  # join characters back without spaces
    # every prompt starts with <bos> so the first real character is predicted with some context
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A $B", special_tokens=[(BOS, vocab[BOS])]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=BOS, eos_token=EOS, pad_token=PAD, unk_token=UNK,
        padding_side="left",  # batched generation continues every prompt from its last column
        clean_up_tokenization_spaces=False,
    )


# Architecture presets for `build_tiny_policy(arch=...)`.
ARCHS = {"llama": (LlamaConfig, LlamaForCausalLM), "gpt2": (GPT2Config, GPT2LMHeadModel)}


def build_tiny_policy(
    tokenizer: PreTrainedTokenizerFast,
    *,
    arch: str = "llama",
    n_layer: int = 4,
    d_model: int = 128,
    n_head: int = 4,
    max_len: int = 128,
    seed: int = 0,
) -> PreTrainedModel:
    """A small decoder-only causal LM from a `transformers` config (no download).

    Args:
        tokenizer: supplies the vocabulary size and the pad/bos/eos ids written into the config.
        arch: "llama" (RoPE, RMSNorm, SwiGLU) or "gpt2" (learned positions, LayerNorm, GELU).
        n_layer, d_model, n_head: depth, width and attention heads (4 x 128 is ~0.8M parameters).
        max_len: longest prompt + completion in tokens.
        seed: initialisation seed, so the same arguments build the same weights.
    """
    if arch not in ARCHS:
        raise ValueError(f"unknown arch {arch!r}; known: {', '.join(ARCHS)}")
    if d_model % n_head:
        raise ValueError(f"d_model ({d_model}) must be divisible by n_head ({n_head})")
    ids = dict(
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
    )
    config_cls, model_cls = ARCHS[arch]
    if arch == "llama":
        config = config_cls(
            hidden_size=d_model, intermediate_size=4 * d_model, num_hidden_layers=n_layer,
            num_attention_heads=n_head, num_key_value_heads=n_head, max_position_embeddings=max_len,
            **ids,
        )
    else:
        config = config_cls(
            n_embd=d_model, n_layer=n_layer, n_head=n_head, n_positions=max_len,
            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,  # RL needs the same log-probs twice
            **ids,
        )
    model = model_cls(config)
    initialise(model, seed, n_layer)
    model.loss_type = "ForCausalLM"  # GPT2LMHeadModel's class name does not say so; silences a warning
    return model


def initialise(model: PreTrainedModel, seed: int, n_layer: int, std: float = 0.02) -> None:
    """GPT-2-style initial weights drawn by the package itself, the same on every CPU.

    transformers draws its initial weights in float32, and float32 `normal_` takes another code
    path (and gives other numbers) under AVX2, AVX-512 or the default kernels; the warm start then
    amplifies that into a different base model. Here every weight is drawn in float64 from one
    seeded generator, parameter by parameter in name order, and cast: normal(0, std), the residual
    projections scaled by 1 / sqrt(2 n_layer) as in GPT-2, biases 0 and norm gains 1.
    """
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in sorted(model.named_parameters(), key=lambda item: item[0]):
            if name.endswith("bias"):
                param.zero_()
            elif "ln" in name.split(".")[-2] or "norm" in name:
                param.fill_(1.0)
            else:
                residual = name.endswith(("c_proj.weight", "o_proj.weight", "down_proj.weight"))
                scale = std / math.sqrt(2 * n_layer) if residual else std
                values = torch.randn(param.shape, generator=generator, dtype=torch.float64) * scale
                param.copy_(values.to(param.dtype))


def load_policy(
    path: str | Path, *, dtype: torch.dtype | str | None = None, device: str | torch.device = "cpu",
    attn_implementation: str | None = None, **kwargs
) -> tuple[PreTrainedModel, PreTrainedTokenizerFast]:
    """Load a causal LM and its tokenizer from a local folder written by `save_pretrained`.

    Works for the warm-started tiny model and for downloaded pretrained models alike;
    `attn_implementation` (None: the model's own) and `kwargs` go to
    `AutoModelForCausalLM.from_pretrained`.
    """
    if attn_implementation is not None:
        kwargs["attn_implementation"] = attn_implementation
    path = Path(path)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"no model folder at {path} (config.json missing); run `pods warmstart` first")
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token is None:  # many pretrained LMs ship without one
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, **kwargs).to(device)
    return model, tokenizer


def fuse_activations(model: torch.nn.Module) -> int:
    """Swap every `NewGELUActivation` (GPT-2's tanh GELU written as eight elementwise operations) for
    transformers' `GELUTanh` (torch's fused `gelu(approximate="tanh")`, the same function); returns how
    many were swapped.

    At the embedded model's shapes on a CPU the eager chain (its `tanh`, `pow` and multiplications)
    was about a quarter of the update and a tenth of decoding (benchmarks/roofline.py --profile); the
    fused kernel is one pass forward and one backward. The two differ in the last bits, which is
    why it is the config key `fused_activation`.
    """
    from transformers.activations import GELUTanh, NewGELUActivation

    swapped = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is NewGELUActivation:
                setattr(parent, name, GELUTanh())
                swapped += 1
    return swapped


def n_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
