"""`deepspeed` update engine: full fine-tuning under DeepSpeed ZeRO-1/2/3, one process per device.

The paper's multi-GPU setting (docs/paper.md 2.2: accelerate + ZeRO-2, 8 processes, bf16). Started by
a launcher (deepspeed, torchrun or accelerate), every process builds this engine; they then train
one model together.

How a step is split. Selection has already happened when `step` is called: the batch holds the
kept rollouts of the whole step and is the same on every process (the trainer gathers it with
`pods.training.distributed.gather_batch`). Process r takes rows [r*B/W, (r+1)*B/W) and runs
ceil(B/W / micro_batch) micro-batches, so every process runs the same number of forward/backward
passes (ZeRO's collectives need that). Each micro-batch loss is divided by the whole step's totals (sequences,
tokens) and multiplied by W because DeepSpeed averages gradients over processes: the summed
gradient is then exactly the single-process gradient of the whole batch.
"""
from __future__ import annotations

import copy
import math
import os
import shutil
from pathlib import Path

import torch
import torch.distributed as dist

from pods.training.distributed import import_deepspeed, world
from pods.training.options import ConfigError, EngineOptions, engine_options
from pods.training.update.base import UpdateBatch, UpdateEngine, make_optimizer, warmup_schedule
from pods.training.update.torch_engine import accumulate_gradients, step_totals, token_logprobs


@engine_options
class DeepSpeedOptions(EngineOptions):
    """The DeepSpeed engine's settings: the TrainConfig fields of these names (defaults and help there)."""

    deepspeed_zero_stage: int
    deepspeed_offload_optimizer: bool
    gradient_checkpointing: bool
    dist_backend: str

    def validate(self) -> "DeepSpeedOptions":
        if self.deepspeed_zero_stage not in (0, 1, 2, 3):
            raise ConfigError("deepspeed_zero_stage", "config key 'deepspeed_zero_stage': must be 0, 1, 2 or 3, "
                              f"got {self.deepspeed_zero_stage}")
        return self


def shard(rows: int, rank: int, size: int) -> tuple[int, int]:
    """Rows [start, stop) of process `rank` when `rows` are split evenly over `size` processes."""
    if rows % size:
        raise ValueError(
            f"a step's {rows} kept rollouts do not split evenly over {size} processes: make "
            f"prompts_per_step * m (times the groups per prompt) a multiple of the process count"
        )
    per = rows // size
    return rank * per, (rank + 1) * per


def deepspeed_config(config, options: DeepSpeedOptions, world_size: int, rows_per_step: int) -> dict:
    """The DeepSpeed JSON config of a run, from the TrainConfig (one source of truth)."""
    per_process = rows_per_step // world_size
    micro = min(config.micro_batch, per_process)
    accumulation = math.ceil(per_process / micro)
    zero: dict = {"stage": options.deepspeed_zero_stage, "contiguous_gradients": True,
                  "overlap_comm": torch.cuda.is_available()}
    if options.deepspeed_offload_optimizer:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    return {
        "train_micro_batch_size_per_gpu": micro,
        "gradient_accumulation_steps": accumulation,
        "train_batch_size": micro * accumulation * world_size,
        "gradient_clipping": float(config.max_grad_norm),  # 0 disables, as in the torch engine
        "zero_optimization": zero,
        "bf16": {"enabled": config.precision == "bf16"},
        "fp16": {"enabled": config.precision == "fp16"},
        "zero_allow_untested_optimizer": True,  # the torch AdamW handed in, same as the torch engine
        "steps_per_print": 2**31 - 1,
        "wall_clock_breakdown": False,
    }


class DeepSpeedUpdateEngine(UpdateEngine):
    """The policy wrapped by a DeepSpeed engine; see the module docstring for the split.

    Args:
        model: the policy (the same initial weights on every process).
        config: a TrainConfig (lr, betas, weight decay, warm-up, max_grad_norm, micro_batch,
            prompts_per_step, m, beta, always_compute_ref, loss_agg, precision, device) plus the
            fields of `DeepSpeedOptions`.
    """


    def __init__(self, *, model, config):
        deepspeed = import_deepspeed()
        self.cfg = config
        self.options = DeepSpeedOptions.from_config(config)
        if not (dist.is_available() and dist.is_initialized()):
            backend = self.options.dist_backend or ("nccl" if torch.cuda.is_available() else "gloo")
            deepspeed.init_distributed(dist_backend=backend)
        self.rank, self.world_size = world()
        if str(config.device).startswith("cuda"):
            self.device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
            torch.cuda.set_device(self.device)
        else:
            self.device = torch.device(config.device)
        self.rows_per_step = config.rollouts_trained
        shard(self.rows_per_step, 0, self.world_size)  # fail before any compute on a bad split
        if self.options.gradient_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model = model.to(self.device)
        # The reference is a frozen copy, kept only when something reads it (beta > 0, or the
        # authors' always-computed reference); under ZeRO-3 it would need its own sharding.
        self.reference = None
        if config.beta > 0 or getattr(config, "always_compute_ref", False):
            if self.options.deepspeed_zero_stage == 3:
                raise ValueError("config key 'beta': a reference model is not supported with deepspeed_zero_stage 3")
            self.reference = copy.deepcopy(model).requires_grad_(False).eval()
        optimizer = make_optimizer([p for p in model.parameters() if p.requires_grad], config)
        scheduler = warmup_schedule(optimizer, config.lr_warmup_steps)
        self.ds_config = deepspeed_config(config, self.options, self.world_size, self.rows_per_step)
        self.engine, self.optimizer, _, self.scheduler = deepspeed.initialize(
            model=model, optimizer=optimizer, lr_scheduler=scheduler, config=self.ds_config
        )
        self.policy = self.engine.module
        self.policy.eval()  # no dropout: the ratio and KL compare log-probs of the same weights

    # ---------------------------------------------------------------------------------- helpers
    def _micro_batches(self, batch: UpdateBatch):
        start, stop = shard(len(batch), self.rank, self.world_size)
        size = self.ds_config["train_micro_batch_size_per_gpu"]
        for lo in range(start, stop, size):
            hi = min(lo + size, stop)
            yield slice(lo, hi), batch.slice(lo, hi).to(self.device)

    def _autocast(self):
        if self.cfg.precision == "fp32":
            return torch.autocast(self.device.type, enabled=False)
        dtype = torch.bfloat16 if self.cfg.precision == "bf16" else torch.float16
        return torch.autocast(self.device.type, dtype=dtype)

    def _all_rows(self, local: torch.Tensor, batch: UpdateBatch) -> torch.Tensor:
        """Every process's rows of a [rows, T] result, in batch order, on every process."""
        if self.world_size == 1:
            return local
        parts = [torch.zeros_like(local) for _ in range(self.world_size)]
        dist.all_gather(parts, local.to(self._comm_device()))
        return torch.cat([p.cpu() for p in parts])

    def _comm_device(self):
        return self.device if dist.get_backend() == "nccl" else torch.device("cpu")

    @torch.no_grad()
    def _logprobs_of(self, model, batch: UpdateBatch) -> torch.Tensor:
        start, stop = shard(len(batch), self.rank, self.world_size)
        local = torch.zeros((stop - start, batch.completion_len), dtype=torch.float32)
        for rows, mb in self._micro_batches(batch):
            with self._autocast():
                logprobs = token_logprobs(model, mb).float().cpu()
                local[rows.start - start : rows.stop - start, : mb.completion_len] = logprobs
        return self._all_rows(local, batch)

    # ------------------------------------------------------------------------------ interface
    def logprobs(self, batch: UpdateBatch) -> torch.Tensor:
        return self._logprobs_of(self.engine, batch)  # the forward DeepSpeed wraps, as in training

    def step(self, batch, advantages, old_logprobs=None, ref_logprobs=None) -> dict[str, float]:
        cfg = self.cfg
        lr = self.scheduler.get_last_lr()[0]

        def backward(loss, last):
            # DeepSpeed averages gradients over processes and would divide by its accumulation
            # count: undo both, the loss is already normalised by the whole step's totals
            self.engine.set_gradient_accumulation_boundary(last)
            self.engine.backward(loss * self.world_size, scale_wrt_gas=False)
            self.engine.step()  # applies the optimiser only at the boundary set above

        # the totals are the whole step's, the same on every process (the batch is the whole step's)
        loss_sum, kl_sum = accumulate_gradients(
            self.engine, list(self._micro_batches(batch)), advantages, cfg, totals=step_totals(batch),
            old_logprobs=old_logprobs, ref_logprobs=ref_logprobs, device=self.device, autocast=self._autocast,
            backward=backward,
        )
        summed = torch.tensor([loss_sum, kl_sum], dtype=torch.float64, device=self._comm_device())
        if self.world_size > 1:
            dist.all_reduce(summed)
        grad_norm = self.engine.get_global_grad_norm()
        result = {"loss": float(summed[0]), "grad_norm": float(grad_norm if grad_norm is not None else 0.0), "lr": lr}
        if cfg.beta > 0:
            result["kl"] = float(summed[1]) / len(batch)
        return result

    # ------------------------------------------------------------------------------ checkpoints
    # DeepSpeed owns the partitioned state (ZeRO-1/2 optimiser shards, ZeRO-3 parameter shards), so
    # its own save_checkpoint/load_checkpoint write it, under {run_dir}/checkpoint/deepspeed/<tag>/.
    # The trainer's per-process state file (written after this returns) records the tag and the
    # sha256 of every file under it; a new tag per save means a kill mid-save leaves the tag the
    # last state file names intact. The tag before the previous one is deleted once every process
    # has finished the current save. DeepSpeed's loader unpickles these files (torch.load allowing
    # any global): the trainer checks their digests before `load_state_dict` runs.
    library_loader = "DeepSpeed's load_checkpoint unpickles its own files"

    def checkpoint_dir(self) -> Path:
        return self.cfg.output_dir() / "checkpoint" / "deepspeed"

    def checkpoint_files(self, state: dict) -> list[Path]:
        return sorted(p for p in (self.checkpoint_dir() / state["deepspeed_tag"]).rglob("*") if p.is_file())

    def state_dict(self) -> dict:
        """Collective: every process calls it at the same step. Returns the tag to load back."""
        self._saves = getattr(self, "_saves", 0) + 1
        tag = f"save{self._saves}"
        self.engine.save_checkpoint(str(self.checkpoint_dir()), tag=tag, save_latest=False)
        if self.world_size > 1:
            dist.barrier()
        if self.rank == 0:
            for old in self.checkpoint_dir().glob("save*"):
                if old.name not in (tag, f"save{self._saves - 1}"):
                    shutil.rmtree(old, ignore_errors=True)
        return {"deepspeed_tag": tag, "saves": self._saves, "rank": self.rank, "world_size": self.world_size}

    def load_state_dict(self, state: dict) -> None:
        if (state.get("rank"), state.get("world_size")) != (self.rank, self.world_size):
            raise ValueError(
                f"checkpoint is rank {state.get('rank')} of {state.get('world_size')} processes, "
                f"this process is rank {self.rank} of {self.world_size}"
            )
        path, _ = self.engine.load_checkpoint(
            str(self.checkpoint_dir()), tag=state["deepspeed_tag"],
            load_optimizer_states=True, load_lr_scheduler_states=True,
        )
        if path is None:
            raise ValueError(f"no DeepSpeed checkpoint {state['deepspeed_tag']!r} under {self.checkpoint_dir()}")
        self._saves = state["saves"]
