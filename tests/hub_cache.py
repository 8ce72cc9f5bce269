"""A hub cache, offline, holding what the paper study names: tiny models under the paper's model ids
and tiny datasets in the hub repositories' own file layouts.

huggingface_hub reads a cache repository as `{models,datasets}--owner--name/` with `refs/main`
(the commit `main` points to) and `snapshots/<commit>/` (the files); with HF_HUB_OFFLINE=1 and
HF_HUB_CACHE pointing here, `snapshot_download` answers from it exactly as it would from a cache a
download filled. The models have the paper's architectures (Qwen2, Llama) with random weights and
a character tokenizer carrying a ChatML template, a few hundred kB each.
"""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pandas as pd

MODELS = {  # hub id -> architecture
    "Qwen/Qwen2.5-3B-Instruct": "qwen2",
    "Qwen/Qwen2.5-7B-Instruct": "qwen2",
    "meta-llama/Llama-3.2-3B-Instruct": "llama",
}
CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# Short questions: the character tokenizer stands in for Qwen's in the 512-token prompt filter.
GSM8K = {
    "train": [("Tom has 3 apples and buys 4 more. How many apples?", "3 + 4 = <<3+4=7>>7\n#### 7"),
              ("A box holds 6 pens. How many pens in 2 boxes?", "6 * 2 = <<6*2=12>>12\n#### 12"),
              ("Sam had 9 cards and gave away 5. How many are left?", "9 - 5 = <<9-5=4>>4\n#### 4")],
    "test": [("Ann reads 5 pages a day. How many pages in 3 days?", "5 * 3 = <<5*3=15>>15\n#### 15"),
             ("There are 8 birds and 2 fly off. How many stay?", "8 - 2 = <<8-2=6>>6\n#### 6")],
}
MATH_SUBSETS = ("algebra", "counting_and_probability", "geometry", "intermediate_algebra",
                "number_theory", "prealgebra", "precalculus")


def _commit(hub_id: str) -> str:
    return hashlib.sha1(hub_id.encode()).hexdigest()


def _repo(cache: Path, hub_id: str, kind: str, commit: str | None) -> Path:
    commit = commit if commit and len(commit) == 40 else _commit(hub_id)
    repo = cache / f"{kind}s--{hub_id.replace('/', '--')}"
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(commit)
    snapshot = repo / "snapshots" / commit
    shutil.rmtree(snapshot, ignore_errors=True)
    snapshot.mkdir(parents=True)
    return snapshot


def tiny_model(folder: Path, arch: str, seed: int = 0) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    from pods.training.models import build_char_tokenizer

    tokenizer = build_char_tokenizer()
    tokenizer.chat_template = CHATML
    config_cls, model_cls = {"llama": (LlamaConfig, LlamaForCausalLM), "qwen2": (Qwen2Config, Qwen2ForCausalLM)}[arch]
    config = config_cls(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=2, max_position_embeddings=2048, tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(seed)
    model_cls(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def write_datasets(cache: Path, pins: dict[str, str]) -> None:
    gsm8k = _repo(cache, "openai/gsm8k", "dataset", pins.get("openai/gsm8k"))
    (gsm8k / "main").mkdir()
    for split, rows in GSM8K.items():
        pd.DataFrame(rows, columns=["question", "answer"]).to_parquet(gsm8k / f"main/{split}-00000-of-00001.parquet")
    math = _repo(cache, "EleutherAI/hendrycks_math", "dataset", pins.get("EleutherAI/hendrycks_math"))
    for k, subset in enumerate(MATH_SUBSETS):
        (math / subset).mkdir()
        for split in ("train", "test"):
            rows = [{"problem": f"What is ${k} + {j}$?", "level": "Level 1", "type": subset,
                     "solution": f"${k} + {j} = \\boxed{{{k + j}}}$"} for j in ((1, 2) if split == "train" else (3,))]
            pd.DataFrame(rows).to_parquet(math / f"{subset}/{split}-00000-of-00001.parquet")
    math500 = _repo(cache, "HuggingFaceH4/MATH-500", "dataset", pins.get("HuggingFaceH4/MATH-500"))
    with open(math500 / "test.jsonl", "w") as f:
        for i, (problem, answer) in enumerate([("What is $\\frac{3}{6}$ in lowest terms?", "\\frac{1}{2}"),
                                               ("What is $2^3$?", "8")]):
            f.write(json.dumps({"problem": problem, "solution": "...", "answer": answer, "subject": "Algebra",
                                "level": 1, "unique_id": f"test/algebra/{i}.json"}) + "\n")


def build(cache: Path, pins: dict[str, str] | None = None) -> Path:
    """Fill `cache` (an HF_HUB_CACHE folder) with the paper study's models and datasets; a pinned
    commit in `pins` becomes the snapshot's commit, so a pinned fetch resolves offline."""
    pins = pins or {}
    for hub_id, arch in MODELS.items():
        tiny_model(_repo(cache, hub_id, "model", pins.get(hub_id)), arch)
    write_datasets(cache, pins)
    return cache
