"""The few torch.distributed helpers of a multi-process run, in one place.

A multi-process update engine (deepspeed) starts torch.distributed; everything else asks this
module who it is (`world`), sums a few numbers over the processes (`all_sum`), waits for the
others (`barrier`), gathers the step's kept rollouts (`gather_batch`) and reads whole weights
out of a possibly ZeRO-3-sharded model (`full_weights`). Outside a distributed run each is the
identity (rank 0 of 1). The module imports neither the rollout nor the update package (only
`pods.training.batches`), so both may import it.
"""
from __future__ import annotations

from typing import Iterator

import torch
import torch.distributed as dist

from pods.training.batches import UpdateBatch


def world() -> tuple[int, int]:
    """(rank, world size); (0, 1) outside a distributed run."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def all_sum(values: list[float]) -> list[float]:
    """Element-wise sum over processes (identity in one process)."""
    if world()[1] == 1:
        return values
    nccl = dist.get_backend() == "nccl"
    t = torch.tensor(values, dtype=torch.float64, device=torch.cuda.current_device() if nccl else "cpu")
    dist.all_reduce(t)
    return t.tolist()


def barrier() -> None:
    """Wait for every process (nothing to wait for in one process)."""
    if world()[1] > 1:
        dist.barrier()


def import_deepspeed():
    """The deepspeed module, or one clear error line when it is not installed."""
    try:
        import deepspeed
    except ImportError:
        raise ValueError("update_engine 'deepspeed' needs the deepspeed package: pip install -e '.[gpu]'") from None
    return deepspeed


def full_weights(module: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, tensor) of every weight of `module`, whole even when ZeRO-3 has sharded it.

    For pushing weights to a rollout engine. Unsharded modules give their state_dict. Under ZeRO-3
    each parameter is gathered in turn (collective: every process iterates in the same order) and
    yielded as a copy, so at most one whole parameter is gathered at a time.
    """
    params = dict(module.named_parameters())
    if not any(hasattr(p, "ds_id") for p in params.values()):
        yield from module.state_dict().items()
        return
    deepspeed = import_deepspeed()
    for name, param in params.items():
        with deepspeed.zero.GatheredParameters([param]):
            yield name, param.detach().clone()


def gather_batch(local: UpdateBatch, local_advantages: torch.Tensor, pad_id: int) -> tuple[UpdateBatch, torch.Tensor]:
    """The whole step's kept batch on every process, from each process's own kept rollouts.

    For trainers that shard generation by process (process r samples prompts r, r+W, ...) and
    select within its own groups: the concatenation, in rank order, is what the update engine's
    `step` splits back. Widths differ between processes, so prompts are re-padded on the left and
    completions on the right.
    """
    rank, size = world()
    if size == 1:
        return local, local_advantages
    items = [None] * size
    payload = (local.input_ids, local.attention_mask, local.completion_mask, local_advantages)
    dist.all_gather_object(items, tuple(t.cpu() for t in payload))
    P = max(ids.shape[1] - cm.shape[1] for ids, _, cm, _ in items)
    T = max(cm.shape[1] for _, _, cm, _ in items)
    ids_out, att_out, cm_out, adv_out = [], [], [], []
    for ids, att, cm, adv in items:
        t = cm.shape[1]
        p = ids.shape[1] - t
        rows = ids.shape[0]
        new_ids = torch.full((rows, P + T), pad_id, dtype=ids.dtype)
        new_att = torch.zeros((rows, P + T), dtype=att.dtype)
        new_cm = torch.zeros((rows, T), dtype=cm.dtype)
        new_ids[:, P - p : P + t], new_att[:, P - p : P + t], new_cm[:, :t] = ids, att, cm
        ids_out.append(new_ids), att_out.append(new_att), cm_out.append(new_cm), adv_out.append(adv)
    batch = UpdateBatch(torch.cat(ids_out), torch.cat(att_out), torch.cat(cm_out))
    return batch, torch.cat(adv_out)
