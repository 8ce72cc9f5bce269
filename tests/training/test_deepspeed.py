"""The `deepspeed` update engine: ZeRO-1/2 with 2 processes over gloo on CPU equals one process.

A tiny Llama built from a config; both processes get the same whole-step batch, each trains its
half. Loss, updated weights and log-probs must match the single-process `torch` engine's. A
checkpoint written at step 1 and loaded into a fresh engine continues exactly as the original.
"""
import importlib.util
import os
import socket

import pytest
import torch
import torch.multiprocessing as mp

# skipped where deepspeed is not installed; an installed deepspeed that fails to import fails here
if importlib.util.find_spec("deepspeed") is None:
    pytest.skip("deepspeed is not installed (it is in the dev extra)", allow_module_level=True)

from pods.training.config import TrainConfig  # noqa: E402
from pods.training.update.base import UpdateBatch  # noqa: E402
from pods.training.update.torch_engine import TorchUpdateEngine  # noqa: E402
from tiny_models import padded_batch, tiny_lm  # noqa: E402

VOCAB = 40
ROWS = 8  # prompts_per_step 2 x m 4


def tiny_llama(seed: int = 0):
    return tiny_lm("llama", VOCAB, seed=seed)


def make_batch(seed: int = 0, prompt: int = 5, completion: int = 6) -> UpdateBatch:
    # rows end at different points: token counts differ by shard
    return padded_batch(seed, VOCAB, ROWS, prompt, completion, left_pad=lambda i: i % 2, cut=lambda i: (i % 3) * 2)


def train_config(stage: int, loss_agg: str) -> TrainConfig:
    cfg = TrainConfig(
        lr=1e-2, micro_batch=2, prompts_per_step=2, n=8, m=4, rule="max_variance", max_grad_norm=1.0,
        weight_decay=0.0, loss_agg=loss_agg,
    )
    cfg.deepspeed_zero_stage = stage  # engine option, read by name
    cfg.dist_backend = "gloo"
    return cfg


ADVANTAGES = torch.tensor([1.2, -0.8, 0.3, -0.7, 0.9, -1.1, 0.1, 0.1])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# (ZeRO stage, loss aggregation): bnpo divides by the step's token count, which differs between
# the two processes' halves, so it checks that totals are the whole step's, not each process's.
SETTINGS = [(1, "bnpo"), (2, "grpo")]
RESUME_STAGES = [2, 3]


def _worker(rank, world, port, out, run_dir):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world))
    torch.set_num_threads(1)
    from pods.training.distributed import full_weights
    from pods.training.update.deepspeed_engine import DeepSpeedUpdateEngine

    for stage, loss_agg in SETTINGS:  # one process group for every setting: start-up is the cost
        engine = DeepSpeedUpdateEngine(model=tiny_llama(), config=train_config(stage, loss_agg))
        results = [engine.step(make_batch(s), ADVANTAGES) for s in (0, 1)]
        logprobs = engine.logprobs(make_batch(2))
        params = {k: v.detach().clone() for k, v in engine.policy.state_dict().items()}
        out[(rank, stage, loss_agg)] = dict(
            results=results, logprobs=logprobs, params=params,
            micro_batches=len(list(engine._micro_batches(make_batch(0)))),
        )
    import pods.training.update.deepspeed_engine as engine_module

    def sharded_config(*args):  # ZeRO-3 keeps parameters under 1e5 elements whole: shard them all
        ds = default_config(*args)
        ds["zero_optimization"]["stage3_param_persistence_threshold"] = 0
        return ds

    default_config, engine_module.deepspeed_config = engine_module.deepspeed_config, sharded_config
    for stage in RESUME_STAGES:  # save after step 1, then step 2 in the same and in a fresh engine
        cfg = train_config(stage, "grpo")
        cfg.run_dir = f"{run_dir}/stage{stage}"
        engine = DeepSpeedUpdateEngine(model=tiny_llama(), config=cfg)
        weights = {k: v.clone() for k, v in full_weights(engine.policy)}  # what a rollout engine is sent
        engine.step(make_batch(0), ADVANTAGES)
        for _ in range(2):  # older saves, to check that only the last two are kept
            engine.state_dict()
        state = engine.state_dict()
        continued = engine.step(make_batch(1), ADVANTAGES)
        fresh = DeepSpeedUpdateEngine(model=tiny_llama(seed=1), config=cfg)  # other weights: all must load
        fresh.load_state_dict(state)
        resumed = fresh.step(make_batch(1), ADVANTAGES)
        out[(rank, "resume", stage)] = dict(
            continued=continued, resumed=resumed, logprobs=(engine.logprobs(make_batch(2)),
                                                            fresh.logprobs(make_batch(2))),
            tags=sorted(p.name for p in fresh.checkpoint_dir().glob("save*")), state=state,
            weights=weights,
            params={k: v.detach().clone() for k, v in engine.policy.named_parameters()},
        )
    torch.distributed.destroy_process_group()


@pytest.fixture(scope="module")
def distributed(tmp_path_factory) -> dict:
    manager = mp.Manager()
    out = manager.dict()
    run_dir = str(tmp_path_factory.mktemp("deepspeed-run"))
    mp.spawn(_worker, args=(2, _free_port(), out, run_dir), nprocs=2, join=True)
    return dict(out)


def run_single(loss_agg: str) -> dict:
    torch.set_num_threads(1)
    engine = TorchUpdateEngine(model=tiny_llama(), config=train_config(2, loss_agg))
    results = [engine.step(make_batch(s), ADVANTAGES) for s in (0, 1)]
    return dict(results=results, logprobs=engine.logprobs(make_batch(2)), params=engine.policy.state_dict())


@pytest.mark.slow
@pytest.mark.parametrize("stage,loss_agg", SETTINGS)
def test_two_processes_equal_one(distributed, stage, loss_agg):
    single = run_single(loss_agg)
    dist_out = {rank: distributed[(rank, stage, loss_agg)] for rank in (0, 1)}
    assert dist_out[0]["micro_batches"] == dist_out[1]["micro_batches"] == 2  # 4 rows each, micro 2
    for step in (0, 1):
        for rank in (0, 1):
            assert dist_out[rank]["results"][step]["loss"] == pytest.approx(single["results"][step]["loss"], rel=1e-5,
                                                                            abs=1e-7)
            assert dist_out[rank]["results"][step]["grad_norm"] == pytest.approx(single["results"][step]["grad_norm"],
                                                                                 rel=1e-4)
    for name, value in single["params"].items():
        for rank in (0, 1):
            assert torch.allclose(dist_out[rank]["params"][name], value, atol=1e-5), (rank, name)
    assert torch.allclose(dist_out[0]["logprobs"], single["logprobs"], atol=1e-5)
    assert torch.equal(dist_out[0]["logprobs"], dist_out[1]["logprobs"])


@pytest.mark.slow
@pytest.mark.parametrize("stage", RESUME_STAGES)
def test_checkpoint_resumes_exactly(distributed, stage):
    for rank in (0, 1):
        got = distributed[(rank, "resume", stage)]
        assert got["state"] == {"deepspeed_tag": "save3", "saves": 3, "rank": rank, "world_size": 2}
        assert got["resumed"]["loss"] == pytest.approx(got["continued"]["loss"], rel=1e-6, abs=1e-8)
        assert got["resumed"]["grad_norm"] == pytest.approx(got["continued"]["grad_norm"], rel=1e-6)
        assert torch.allclose(*got["logprobs"], atol=1e-6)
        assert got["tags"] == ["save2", "save3"]  # save1 pruned; the fresh engine saved nothing
    # weights pushed to a rollout engine are whole, also when ZeRO-3 holds half of each per process
    # (compared before any step: Adam's first step moves near-zero gradients by +-lr, so trained
    # weights of different reduction orders can differ by more than any tight tolerance)
    expected = dict(tiny_llama().named_parameters())
    weights = distributed[(0, "resume", stage)]["weights"]
    assert expected.keys() <= weights.keys()  # a state_dict also names tied weights twice
    for name, value in expected.items():
        assert torch.equal(weights[name], value.detach()), name
    if stage == 3:
        assert all(p.numel() == 0 for p in distributed[(0, "resume", stage)]["params"].values())  # really sharded


def test_split_and_config_helpers():
    from pods.training.update.deepspeed_engine import DeepSpeedOptions, deepspeed_config, shard

    assert [shard(8, r, 2) for r in (0, 1)] == [(0, 4), (4, 8)]
    with pytest.raises(ValueError, match="split evenly"):
        shard(6, 0, 4)
    cfg = train_config(2, "grpo")
    cfg.micro_batch = 32
    cfg.prompts_per_step, cfg.m = 32, 32  # the paper's PODS arm: 32 x 32 rows over 8 GPUs
    ds = deepspeed_config(cfg, DeepSpeedOptions.from_config(cfg), world_size=8, rows_per_step=32 * 32)
    assert ds["train_micro_batch_size_per_gpu"] == 32 and ds["gradient_accumulation_steps"] == 4
    assert ds["train_batch_size"] == 1024 and ds["zero_optimization"]["stage"] == 2
    cfg.m = 128  # GRPO-GA: every rollout trained, 16 micro-batches of 32 per GPU
    ds = deepspeed_config(cfg, DeepSpeedOptions.from_config(cfg), world_size=8, rows_per_step=32 * 128)
    assert ds["gradient_accumulation_steps"] == 16
    cfg.deepspeed_zero_stage = 4
    with pytest.raises(ValueError, match="deepspeed_zero_stage"):
        DeepSpeedOptions.from_config(cfg)
