"""bf16 in the `torch` update engine on CPU, as the GPU profiles train (`precision: bf16`).

bf16 here is autocast: fp32 master weights and optimiser states, matrix products in bf16 (8
significant bits, a relative rounding error of 2^-9 per product). Four steps with a KL term
from the same start and the same batches in fp32 and bf16 must stay close: log-probs within
0.01 nats of each other, grad norms within 1%, the KL (a small difference of log-probs, so
its relative error is larger) within 5% or 1e-5. The differences must not be zero either,
or bf16 never ran.
"""
import math

import pytest
import torch

from pods.training.config import TrainConfig
from pods.training.update.base import UpdateBatch
from pods.training.update.torch_engine import TorchUpdateEngine
from tiny_models import padded_batch, tiny_lm

VOCAB = 48
LOGPROB_ATOL = 1e-2  # nats; measured about 2e-3 after 4 steps
GRAD_NORM_REL = 1e-2  # measured under 0.1%
KL_REL, KL_ABS = 5e-2, 1e-5  # measured up to 2.2% (4.7e-6)


def make_batch(seed: int, rows: int = 8, prompt: int = 6, completion: int = 8) -> UpdateBatch:
    return padded_batch(seed, VOCAB, rows, prompt, completion, left_pad=lambda i: i % 3, cut=lambda i: i % 4)


def train(precision: str) -> dict:
    torch.set_num_threads(1)
    cfg = TrainConfig(lr=1e-3, micro_batch=4, max_grad_norm=1.0, weight_decay=0.0, beta=0.04, precision=precision)
    engine = TorchUpdateEngine(model=tiny_lm("llama", VOCAB, seed=0), config=cfg)
    steps = []
    for seed in range(4):
        batch = make_batch(seed)
        advantages = torch.randn(len(batch), generator=torch.Generator().manual_seed(100 + seed))
        steps.append(engine.step(batch, advantages, ref_logprobs=engine.ref_logprobs(batch)))
    return dict(steps=steps, logprobs=engine.logprobs(make_batch(9)))


@pytest.fixture(scope="module")
def runs() -> dict:
    return {precision: train(precision) for precision in ("fp32", "bf16")}


def test_bf16_steps_are_finite_and_close_to_fp32(runs):
    fp32, bf16 = runs["fp32"], runs["bf16"]
    for a, b in zip(fp32["steps"], bf16["steps"]):
        assert all(math.isfinite(v) for v in b.values()), b
        assert b["grad_norm"] == pytest.approx(a["grad_norm"], rel=GRAD_NORM_REL)
        assert b["kl"] == pytest.approx(a["kl"], rel=KL_REL, abs=KL_ABS)
    assert fp32["steps"][-1]["kl"] > 1e-5  # the policy moved away from the reference
    difference = (fp32["logprobs"] - bf16["logprobs"]).abs()
    assert difference.max() < LOGPROB_ATOL
    assert difference.max() > 0  # autocast really computed in bf16


def test_bf16_logprobs_come_back_in_fp32(runs):
    # the loss and the ratio exp(new - old) are computed from fp32 log-probs whatever the precision
    assert runs["bf16"]["logprobs"].dtype == torch.float32
