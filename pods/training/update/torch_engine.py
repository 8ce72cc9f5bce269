"""`torch` update engine: one device, AdamW, grad-norm clipping, linear warm-up then constant LR."""
from __future__ import annotations

import contextlib
import copy

import torch
from transformers import DynamicCache

from pods.grpo import policy_loss
from pods.training.models import CACHE
from pods.training.update.base import UpdateBatch, UpdateEngine, make_optimizer, warmup_schedule

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def token_logprobs(model, batch: UpdateBatch, *, share_prompts: bool = True) -> torch.Tensor:
    """Log-probs `[B, T]` of the completion tokens of `batch` (0 on padding), one forward pass.

    The m kept rollouts of a prompt share it: with `share_prompts` each distinct prompt is run
    once and its keys/values are reused by all its rows (as at generation). Gradients reach the
    prompt's computation through the reused keys/values, summed over the rows, so the result and
    its gradient equal the row-by-row computation, for about prompt/(prompt + completion) less work.
    """
    T = batch.completion_len
    prompt_mask = batch.attention_mask[:, :-T]
    if share_prompts and prompt_mask.shape[1] > 0:
        # Always two forward calls, whatever the data: under ZeRO-3 every process must make the
        # same calls, and the kept rows of a step repeat each prompt m >= 2 times anyway.
        keys = torch.cat([batch.input_ids[:, :-T], prompt_mask], dim=1)
        distinct, inverse = torch.unique(keys, dim=0, return_inverse=True)
        return _shared_prompt_logprobs(model, batch, distinct, inverse)
    positions = (batch.attention_mask.cumsum(dim=1) - 1).clamp(min=0)
    # only the T positions that predict completion tokens need the vocabulary projection
    logits = model(
        input_ids=batch.input_ids, attention_mask=batch.attention_mask, position_ids=positions,
        use_cache=False, logits_to_keep=T + 1,
    ).logits[:, :-1, :]
    return _gather(logits, batch)


def _shared_prompt_logprobs(model, batch: UpdateBatch, distinct: torch.Tensor, inverse: torch.Tensor) -> torch.Tensor:
    T, P = batch.completion_len, batch.input_ids.shape[1] - batch.completion_len
    prompt_ids, prompt_mask = distinct[:, :P], distinct[:, P:]
    out = model(
        input_ids=prompt_ids, attention_mask=prompt_mask, position_ids=(prompt_mask.cumsum(1) - 1).clamp(min=0),
        use_cache=True, logits_to_keep=1, **{CACHE: DynamicCache()},
    )
    cache = getattr(out, CACHE)
    cache.batch_select_indices(inverse)  # each row gets its prompt's keys/values (differentiable)
    first = out.logits[:, -1:, :][inverse]  # predicts the first completion token
    prompt_len = batch.attention_mask[:, :P].sum(dim=1, keepdim=True)
    rest = model(
        input_ids=batch.input_ids[:, P:], attention_mask=batch.attention_mask,
        position_ids=prompt_len + torch.arange(T, device=prompt_len.device), use_cache=True, **{CACHE: cache},
    ).logits[:, :-1, :]
    return _gather(torch.cat([first, rest], dim=1), batch)


def _gather(logits: torch.Tensor, batch: UpdateBatch) -> torch.Tensor:
    """Log-prob of each completion token from the logits `[B, T, V]` that predict it."""
    logits = logits.float()
    targets = batch.input_ids[:, -batch.completion_len:]
    # logit of the token minus logsumexp: the same as log_softmax + gather without a [B, T, V] copy
    picked = logits.gather(-1, targets[..., None]).squeeze(-1) - torch.logsumexp(logits, dim=-1)
    return picked * batch.completion_mask


def accumulate_gradients(model, micro_batches, advantages, cfg, *, totals, old_logprobs, ref_logprobs, device,
                         autocast, backward) -> tuple[float, float]:
    """The policy-gradient pass of one step, micro-batch by micro-batch; shared by the engines.

    `micro_batches` is a list of (rows, micro-batch on `device`): `rows` picks the micro-batch's rows of
    the step's batch (a slice, or a tensor of row indices), so that `advantages[rows]` are its own.
    Each micro-batch loss is divided by the whole step's `totals`, so the gradients that
    `backward(loss, last)` accumulates add up to exactly the whole batch's. Returns the summed
    loss and the KL summed over rows.
    """
    loss_sum, kl_sum = 0.0, 0.0
    for i, (rows, mb) in enumerate(micro_batches):
        with autocast():
            logprobs = token_logprobs(model, mb)
        T = mb.completion_len
        old = logprobs.detach() if old_logprobs is None else old_logprobs[rows, :T].to(device)
        ref = None if ref_logprobs is None else ref_logprobs[rows, :T].to(device)
        loss, metrics = policy_loss(
            logprobs, old, advantages[rows].to(device), mb.completion_mask,
            ref_logprobs=ref, beta=cfg.beta, eps_low=cfg.eps_low, eps_high=cfg.eps_high,
            loss_agg=cfg.loss_agg, **totals,
        )
        backward(loss, i == len(micro_batches) - 1)
        loss_sum += loss.item()
        kl_sum += metrics.get("kl", 0.0) * len(mb)
    return loss_sum, kl_sum


def step_totals(batch: UpdateBatch) -> dict:
    """What every micro-batch loss is normalised by: the whole step's sequences and tokens."""
    return dict(total_sequences=len(batch), total_tokens=batch.num_tokens, max_len=batch.completion_len)


# What one more forward and backward pass costs beyond its positions, in completion positions: on
# the embedded model on CPU a GRPO step's 128 rows split 1, 2, 3, 4, 6 ways (sorted by length) took
# 0.170, 0.151, 0.147, 0.150, 0.178 s, so a pass (its dispatch and its shared-prompt pass) costs
# about what 250-300 positions do. The split is exact for this cost; the constant only sets when
# a split pays, and on a GPU, where a position is cheaper than a launch, splitting is rarer still.
PASS_COST_POSITIONS = 256


def length_buckets(lengths: torch.Tensor, micro_batch: int, pass_cost: int = PASS_COST_POSITIONS) -> list[torch.Tensor]:
    """Row indices of the update's micro-batches, grouped by completion length.

    A micro-batch runs every row to its longest completion, so a batch of mixed lengths pays for
    padding (37% of the positions of a GRPO step on the embedded task). The rows are sorted by
    length, cut into runs of at most `micro_batch` rows, and each run is split further where the
    padding saved pays for another pass: the split of the sorted rows that minimises
    sum(rows x longest length + pass_cost) over its buckets, exactly, by dynamic programming over
    the places where the length changes. The loss is a sum over rows normalised by the whole step's
    totals, so the grouping leaves it as it is, up to the order floating-point sums are taken in.
    """
    order = torch.argsort(lengths, stable=True)
    sorted_lengths = lengths[order].tolist()
    buckets = []
    for start in range(0, len(order), micro_batch):
        run = sorted_lengths[start:start + micro_batch]
        # candidate cuts: where the length changes (cutting inside equal lengths saves nothing)
        cuts = [0] + [i for i in range(1, len(run)) if run[i] != run[i - 1]] + [len(run)]
        best = [0.0] + [float("inf")] * (len(cuts) - 1)  # best[j]: cost of the rows before cuts[j]
        back = [0] * len(cuts)
        for j in range(1, len(cuts)):
            for i in range(j):
                cost = best[i] + (cuts[j] - cuts[i]) * run[cuts[j] - 1] + pass_cost
                if cost < best[j]:
                    best[j], back[j] = cost, i
        j, bounds = len(cuts) - 1, []
        while j > 0:
            bounds.append((cuts[back[j]], cuts[j]))
            j = back[j]
        buckets += [order[start + lo:start + hi] for lo, hi in reversed(bounds)]
    return buckets


def compile_mlps(model: torch.nn.Module) -> dict[torch.nn.Module, object]:
    """`torch.compile`d forwards of the model's MLP blocks (modules named `*.mlp`), by module, compiled now.

    On a CPU most of the update's time outside the matrix products is the MLP activation's
    elementwise chain (GPT-2's tanh GELU is eight passes over the widest activation, forward and
    backward); inductor fuses it into one kernel around the products. The blocks are compiled, not
    the whole model, because the shared-prompt pass threads a `DynamicCache` through attention,
    which would break the graph. Shapes change from step to step, hence `dynamic=True`; each block
    runs once forward and backward here, so the compilation is paid while the engine is built (off
    the training clock), not in the first step.
    """
    mlps = {module: torch.compile(module.forward, dynamic=True)
            for name, module in model.named_modules() if name.endswith(".mlp")}
    if not mlps:
        raise ValueError("config key 'compile_update': the policy has no modules named '*.mlp' to compile")
    parameter = next(model.parameters())
    width = model.config.hidden_size
    for module, forward in mlps.items():
        x = torch.zeros(2, 3, width, dtype=parameter.dtype, device=parameter.device, requires_grad=True)
        forward(x).sum().backward()
    model.zero_grad(set_to_none=True)  # the warm-up's gradients are not the first step's
    return mlps


@contextlib.contextmanager
def swapped_forwards(forwards: dict):
    """Run the modules of `forwards` through the given forward functions inside the block only, so
    that the rollouts, which share the policy object, keep the eager kernels."""
    for module, forward in forwards.items():
        module.forward = forward
    try:
        yield
    finally:
        for module in forwards:
            del module.forward  # back to the class's forward


class TorchUpdateEngine(UpdateEngine):
    """The policy and its AdamW on one device.

    Args:
        model: the policy to train; also what the `hf` rollout engine samples from.
        config: a TrainConfig (lr, lr_warmup_steps, weight_decay, adam_beta1/2, max_grad_norm,
            micro_batch, beta, always_compute_ref, eps_low/high, loss_agg, precision, device,
            compile_update).
    """

    compiled_mlps: dict = {}  # module -> its compiled forward (compile_update); none by default

    def __init__(self, *, model, config):
        self.cfg = config
        self.device = torch.device(config.device)
        self.policy = model.to(self.device)
        # dropout off for good: the ratio and the KL compare log-probs of the same weights, which
        # must not differ by a dropout mask (gradients flow in eval mode all the same)
        self.policy.eval()
        if config.gradient_checkpointing:
            self.policy.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        self.optimizer = make_optimizer([p for p in self.policy.parameters() if p.requires_grad], config)
        self.scheduler = warmup_schedule(self.optimizer, config.lr_warmup_steps)
        if getattr(config, "compile_update", False):
            with self._autocast():  # compiled under the autocast the steps run in
                self.compiled_mlps = compile_mlps(self.policy)
        # The reference model exists only when something reads it: with beta == 0 the KL term is
        # zero, so its forward passes would be pure cost (the authors paid it, docs/paper.md 4.7;
        # `always_compute_ref` reproduces that cost).
        self.reference = None
        if config.beta > 0 or config.always_compute_ref:
            self.reference = copy.deepcopy(self.policy).requires_grad_(False)

    def _autocast(self):
        if self.cfg.precision == "fp32":
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=_DTYPES[self.cfg.precision])

    def _chunks(self, batch: UpdateBatch):
        """(rows, micro-batch on the device) pairs covering the batch, at most `micro_batch` rows each:
        grouped by completion length (`length_buckets`), or in rollout order."""
        size = self.cfg.micro_batch
        if self.cfg.length_buckets:
            groups = length_buckets(batch.completion_mask.sum(dim=1), size)
        else:
            groups = [slice(start, min(start + size, len(batch))) for start in range(0, len(batch), size)]
        for rows in groups:
            yield rows, batch.take(rows).to(self.device)

    @torch.no_grad()
    def _logprobs_of(self, model, batch: UpdateBatch) -> torch.Tensor:
        out = torch.zeros(batch.completion_mask.shape, dtype=torch.float32)
        for rows, mb in self._chunks(batch):
            with self._autocast():
                out[rows, : mb.completion_len] = token_logprobs(model, mb).cpu()
        return out

    def step(self, batch, advantages, old_logprobs=None, ref_logprobs=None) -> dict[str, float]:
        cfg = self.cfg
        with swapped_forwards(self.compiled_mlps):
            loss_sum, kl_sum = accumulate_gradients(
                self.policy, list(self._chunks(batch)), advantages, cfg, totals=step_totals(batch),
                old_logprobs=old_logprobs, ref_logprobs=ref_logprobs, device=self.device, autocast=self._autocast,
                backward=lambda loss, last: loss.backward(),
            )
        params = [p for p in self.policy.parameters() if p.requires_grad]
        if cfg.max_grad_norm > 0:
            grad_norm = torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)
        else:
            grad_norm = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in params if p.grad is not None]))
        lr = self.scheduler.get_last_lr()[0]
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        result = {"loss": loss_sum, "grad_norm": float(grad_norm), "lr": lr}
        if cfg.beta > 0:
            result["kl"] = kl_sum / len(batch)
        return result

    def state_dict(self) -> dict:
        return {
            "model": self.policy.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
        }

    def load_state_dict(self, state: dict) -> None:
        self.policy.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
