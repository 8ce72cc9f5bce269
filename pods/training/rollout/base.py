"""The rollout-engine interface: sample n completions for each of G prompts.

An engine owns nothing but a view of the policy: `hf` samples from the very model object the
update engine trains (so `sync_weights` is a no-op), while a vLLM engine keeps its own copy and
receives weights (or a LoRA adapter) in `sync_weights`. The trainer never looks inside.
"""
from __future__ import annotations

from abc import ABC, abstractmethod

import torch

from pods.training.batches import Rollouts  # noqa: F401  (the record `generate` returns, re-exported)


class RolloutEngine(ABC):
    """Batched sampling from the current policy."""

    @abstractmethod
    def generate(
        self,
        prompt_ids: list[list[int]],
        n: int,
        *,
        temperature: float,
        max_new_tokens: int,
        greedy: bool = False,
        seed: int | None = None,
    ) -> Rollouts:
        """Sample `n` completions for each prompt (token ids, no padding).

        Args:
            prompt_ids: G tokenised prompts, each already carrying any BOS / chat template.
            n: completions per prompt; they share the prompt's prefill (computed once).
            temperature: softmax temperature of sampling (ignored when `greedy`).
            max_new_tokens: cap on generated tokens per completion; EOS stops a row earlier.
            greedy: argmax decoding (n > 1 then repeats the same completion).
            seed: sample from a private generator seeded with this value instead of the global
                torch RNG, so that an evaluation does not depend on, or disturb, training's stream.
        """

    def sync_weights(self, model: torch.nn.Module) -> None:
        """Make the next `generate` sample from `model`'s current weights (no-op when shared)."""


def encode_prompts(tokenizer, texts: list[str]) -> list[list[int]]:
    """Tokenise rendered prompts once, without padding.

    A chat template already writes the BOS text, so special tokens are added only when the text
    does not start with it (the embedded character tokenizer prepends `<bos>` itself).
    """
    bos = tokenizer.bos_token
    out = []
    for text in texts:
        add_special = not (bos and text.startswith(bos))
        out.append(tokenizer(text, add_special_tokens=add_special)["input_ids"])
    return out
