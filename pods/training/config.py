"""The training configuration: `TrainConfig`, every knob documented where it is defined, and its checks."""
from __future__ import annotations

import dataclasses
import difflib
import inspect
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from pods.vocabulary import CPPO_RULE, RUN_LAYOUT, Method, kept_rule, method_for

# --- the training configuration ------------------------------------------------------------------
PRECISIONS = ("fp32", "bf16", "fp16")
NORMALIZE_OVER = ("kept", "all")
SAMPLINGS = ("inverse_cdf", "multinomial")  # how a rollout token is drawn (pods.training.rollout.hf.choose)
# transformers' attention implementations a policy can be loaded with, and `auto` (TrainConfig.attn_implementation)
ATTENTIONS = ("auto", "eager", "sdpa", "flash_attention_2", "flash_attention_3", "flex_attention")
# The base model of a run that names none: an embedded benchmark's warm start where the workflow
# builds it (models_dir `models`); `pods train` builds it there itself when it is missing.
DEFAULT_BASE = "models/{benchmark}/base"


@dataclass
class TrainConfig:
    """Everything one GRPO / GRPO-PODS run needs, flat, with the run's defaults.

    Loaded from a YAML file plus `key=value` overrides (`load_train_config`) and validated before
    any compute. The two designs of the paper are pairs of runs, not a field: `equal_update` is
    GRPO (m == n) against PODS (n > m) at the same m; `equal_generation` is GRPO-GA (m == n, the
    large n, more micro-batches) against PODS at the same n. Gradient accumulation is derived, not
    set: `grad_accum = ceil(prompts_per_step * groups_per_prompt * m / micro_batch)`.
    """

    # ---- what is trained, where results go
    benchmark: str = field(default="arith", metadata={"help": "Task name in `pods.training.tasks.TASKS`."})
    task_options: dict = field(
        default_factory=dict, metadata={"help": "Keyword options for `get_task` (e.g. test_size)."}
    )
    hardware: str = field(
        default="cpu", metadata={"help": "Hardware profile name (`<hardware_dir>/<name>.yaml`); a run-path component."}
    )
    hardware_dir: str = field(
        default="config/hardware",
        metadata={"help": "Folder of the hardware profiles: `hardware` must name one of them, and the run records "
                          "its content (summary.json `hardware`). Where the folder does not exist (outside a "
                          "checkout) any name is taken and none is recorded. The workflow sets the study's."},
    )
    seed: int = field(
        default=0,
        metadata={"help": "Seeds the training prompt order, sampling and the random rule; also a run-path component."},
    )
    base_model: str = field(
        default=DEFAULT_BASE,
        metadata={"help": "Model RL starts from: a local folder (save_pretrained layout; `{benchmark}` is filled in) "
                          "or a hub id, read through the hub cache (`pods fetch <id>` fetches it once)."},
    )
    run_dir: str = field(
        default=f"results/local/runs/{RUN_LAYOUT}",
        metadata={"help": "Output folder; `{benchmark}`, `{hardware}`, `{method}`, `{seed}` are filled in. The "
                          "default is git-ignored, away from the committed study (the workflow sets its own)."},
    )

    # ---- rollouts and down-sampling
    n: int = field(
        default=16,
        metadata={"help": "Rollouts per group: each group of n is normalised and down-sampled on its own. A prompt "
                          "gets one group (n rollouts) unless rollouts_per_prompt sets more."},
    )
    m: int = field(
        default=16, metadata={"help": "Rollouts trained on per prompt (m == n is vanilla GRPO, m < n is PODS)."}
    )
    rule: str = field(
        default="max_variance",
        metadata={
            "help": "Down-sampling rule in `pods.selection.SELECTION_RULES`; resolved to `identity` when m == n, "
            "since every rule keeps all n then."
        },
    )
    normalize_over: str = field(
        default="kept",
        metadata={"help": "Advantage mean/std over the `kept` m rollouts (the authors' code) or `all` n."},
    )
    scale_rewards: bool = field(
        default=True, metadata={"help": "Divide advantages by the group std + 1e-4 (False: centre only, Dr. GRPO)."}
    )
    prompts_per_step: int = field(
        default=8, metadata={"help": "Prompts per optimiser step (the paper's single-GPU runs use 1); with "
                                     "completion_allocation (CPPO) the update's size in groups of n, drawn from n / m "
                                     "times as many prompts."}
    )
    rollouts_per_prompt: int | None = field(
        default=None,
        metadata={"help": "Rollouts sampled per prompt, in groups of n that are each normalised and down-sampled "
                          "on their own; null: n (one group). The authors' 8-GPU runs sample 512 per prompt: "
                          "GRPO-GA 16 groups of 32, PODS 4 groups of 128 (docs/paper.md 2.2)."},
    )
    temperature: float = field(default=1.0,
                               metadata={"help": "Sampling temperature of training rollouts (paper: 0.9)."})
    max_new_tokens: int = field(default=32, metadata={"help": "Completion length cap in tokens (paper: 512)."})

    # ---- update
    micro_batch: int = field(
        default=128,
        metadata={"help": "Rollouts per forward/backward pass; a step runs ceil(rollouts_trained/micro_batch) of "
                          "them."},
    )
    lr: float = field(default=1e-4, metadata={"help": "AdamW learning rate (paper, LoRA on 3B: 5e-6)."})
    lr_warmup_steps: int = field(
        default=0, metadata={"help": "Linear warm-up steps, then a constant learning rate (the paper's schedule)."}
    )
    weight_decay: float = field(default=0.1, metadata={"help": "AdamW weight decay (paper: 0.1)."})
    adam_beta1: float = field(default=0.9, metadata={"help": "AdamW beta1 (paper: 0.9)."})
    adam_beta2: float = field(default=0.99, metadata={"help": "AdamW beta2 (paper: 0.99)."})
    max_grad_norm: float = field(
        default=1.0, metadata={"help": "Gradient-norm clip; 0 disables (paper, LoRA on 3B: 0.1)."}
    )
    beta: float = field(
        default=0.0, metadata={"help": "k3 KL penalty weight towards the base model (paper: 0 for Qwen, 0.04 Llama)."}
    )
    always_compute_ref: bool = field(
        default=False,
        metadata={
            "help": "Compute reference log-probs even when beta == 0, as the authors' single-GPU code did "
            "(a constant extra cost on both arms, docs/paper.md section 4.7)."
        },
    )
    eps_low: float = field(default=0.2,
                           metadata={"help": "Lower clip range of the ratio (inactive at one step per batch)."})
    eps_high: float = field(default=0.2, metadata={"help": "Upper clip range of the ratio."})
    loss_agg: str = field(
        default="grpo",
        metadata={"help": "Loss aggregation in `pods.grpo.LOSS_AGGREGATIONS`: grpo (authors), bnpo, dr_grpo."},
    )

    # ---- budget, evaluation, checkpoints
    max_train_time_s: float | None = field(
        default=600.0,
        metadata={"help": "Training-clock budget in seconds (evaluation and checkpoints excluded); null: none."},
    )
    max_steps: int | None = field(default=None, metadata={"help": "Optimiser-step budget; null: none."})
    step_cost_file: str | None = field(
        default=None,
        metadata={"help": "A `pods cost` file: run on the cost clock (docs/verdict.md): step_cost_s is this run's "
                          "method's seconds per step from it, and max_train_time_s / eval_every_s become steps "
                          "(ceil(T / c), round(E / c)) before the run starts; null: the measured clock."},
    )
    step_cost_s: float | None = field(
        default=None,
        metadata={"help": "Seconds per optimiser step on the cost clock; evaluations log cost_time_s = step x it "
                          "(set from step_cost_file, or directly); null: no cost clock."},
    )
    step_cost_se: float | None = field(
        default=None,
        metadata={"help": "Standard error of step_cost_s (set from step_cost_file); the analysis carries it into "
                          "the speedup's interval. It changes nothing in training."},
    )
    eval_every_s: float | None = field(
        default=15.0, metadata={"help": "Evaluate every this many seconds of training time; null: off."}
    )
    eval_every_steps: int | None = field(
        default=None,
        metadata={"help": "Evaluate every this many steps (reproducible across resume, unlike a time schedule); null: "
                          "off."},
    )
    eval_items: int | None = field(
        default=None, metadata={"help": "Evaluate on the first this many test items; null: the whole test set."}
    )
    eval_greedy: bool = field(default=True, metadata={"help": "Greedy decoding at evaluation (False: sampled)."})
    eval_repeats: int = field(
        default=1, metadata={"help": "Samples per test item when sampling (the paper: 5 at temperature 0.9)."}
    )
    eval_temperature: float = field(default=0.9, metadata={"help": "Sampling temperature of sampled evaluation."})
    eval_batch: int = field(default=256, metadata={"help": "Test prompts per generation batch at evaluation."})
    checkpoint_every_s: float = field(
        default=60.0,
        metadata={"help": "Save a resumable checkpoint every this many seconds of training time; 0: every step."}
    )

    # ---- DAPO's dynamic sampling (the method name's `dapo-` prefix sets it)
    dynamic_sampling: bool = field(
        default=False,
        metadata={"help": "Drop every group whose n rewards are all equal (no learning signal) before selection and "
                          "any per-rollout forward pass, and generate for new prompts until the step has "
                          "prompts_per_step informative groups or max_generation_rounds rounds ran (DAPO). One "
                          "process only (torch or lora engine)."},
    )
    max_generation_rounds: int = field(
        default=4,
        metadata={"help": "dynamic_sampling: generation rounds per step at most; the step then trains on the "
                          "informative groups it has (on the last round's when none was)."},
    )

    # ---- CPPO's dynamic completion allocation (the method name's `cppo-` prefix sets it; docs/field.md)
    completion_allocation: bool = field(
        default=False,
        metadata={"help": "CPPO (arXiv 2503.22342): the update keeps the size of prompts_per_step groups of n "
                          "(prompts_per_step * n rollouts) and the slots that keeping m of n frees go to more "
                          "prompts: a step draws prompts_per_step * n / m prompts, generates n for each and trains "
                          "the m of each with the largest |advantage| (rule max_abs_advantage, advantages over all "
                          "n: normalize_over all). CPPO's pruning rate P is 1 - m / n; its code's `allocation=True`, "
                          "`metric='smallest'` (prune the smallest |advantage|). prompts_per_step * n must be a "
                          "multiple of m. One group per prompt (rollouts_per_prompt null), no dynamic_sampling."},
    )

    # ---- GRESO's pre-rollout filter (the method name's `greso-` prefix sets it, with dynamic_sampling)
    pre_rollout_filter: bool = field(
        default=False,
        metadata={"help": "GRESO (arXiv 2506.02177) on top of dynamic_sampling: before generating, each prompt the "
                          "stream draws is skipped with probability 1 - max(p ** z, filter_keep_floor), z its "
                          "latest consecutive groups that were all correct (p = filter_p_easy) or all wrong "
                          "(p = filter_p_hard); skipped prompts are replaced by the next ones of the stream, and "
                          "dynamic sampling then fills the step with informative groups. Each prompt's history is "
                          "part of the checkpoint. One group per prompt (rollouts_per_prompt null)."},
    )
    filter_p_easy: float = field(
        default=0.5,
        metadata={"help": "pre_rollout_filter: the starting base probability p of prompts whose latest groups were "
                          "all correct (GRESO's p_easy 0.5); adapted after every step once the stream is past its "
                          "first epoch (filter_target_zero_variance)."},
    )
    filter_p_hard: float = field(
        default=0.5, metadata={"help": "pre_rollout_filter: the same for all-wrong groups (GRESO's p_hard 0.5)."}
    )
    filter_target_zero_variance: float = field(
        default=0.25,
        metadata={"help": "pre_rollout_filter: GRESO's target share of generated groups that are all correct or all "
                          "wrong: a third of it for all-correct, two thirds for all-wrong. After a step whose "
                          "generated groups exceed a target, that p falls by filter_p_step (more skipping), "
                          "otherwise it rises, within [filter_p_min, filter_p_max]."},
    )
    filter_p_step: float = field(default=0.01,
                                 metadata={"help": "pre_rollout_filter: GRESO's adaptation step of p (0.01)."})
    filter_p_min: float = field(default=0.05, metadata={"help": "pre_rollout_filter: lowest p (GRESO's min_p 0.05)."})
    filter_p_max: float = field(default=0.95, metadata={"help": "pre_rollout_filter: highest p (GRESO's max_p 0.95)."})
    filter_keep_floor: float = field(
        default=0.01,
        metadata={"help": "pre_rollout_filter: the exploration floor: every prompt is generated with probability at "
                          "least this, however long its zero-variance history (GRESO's 0.01)."},
    )
    filter_correct_reward: float = field(
        default=1.0,
        metadata={"help": "pre_rollout_filter: a completion is correct when its reward is at least this (every task "
                          "of the package scores a correct answer 1.0); a group is all correct when each of its n "
                          "is, all wrong when none is."},
    )

    # ---- live tracking (pods.training.tracking): process 0 sends every step record and evaluation as it is written
    report_to: list = field(
        default_factory=list,
        metadata={"help": "Trackers to report to: any of tensorboard, wandb, trackio (`pip install -e '.[track]'`); "
                          "[]: none. The run's JSONL files are written either way and stay the source of truth."},
    )

    # ---- engines and numerics
    rollout_engine: str = field(default="hf",
                                metadata={"help": "Rollout engine in `pods.training.engines.ROLLOUT_ENGINES`."})
    update_engine: str = field(default="torch",
                               metadata={"help": "Update engine in `pods.training.engines.UPDATE_ENGINES`."})
    precision: str = field(default="fp32", metadata={"help": "fp32, or bf16/fp16 autocast for the update."})
    num_threads: int = field(
        default=1, metadata={"help": "torch CPU threads (1 keeps parallel runs on a shared CPU from interfering)."}
    )
    device: str = field(default="cpu", metadata={"help": "torch device of the policy."})
    gradient_checkpointing: bool = field(
        default=False, metadata={"help": "Recompute activations in the backward pass (long completions on a GPU)."}
    )
    optimizer: str = field(
        default="adamw", metadata={"help": "`adamw` (torch), or `adamw_8bit` (bitsandbytes, the paper's; lora engine)."}
    )
    compile_update: bool = field(
        default=False,
        metadata={"help": "torch engine: run the update's forward and backward through `torch.compile`d MLP blocks "
                          "(inductor fuses the activation's elementwise chain), compiled when the engine is built, "
                          "off the training clock. The numbers change in the last bits, so the committed runs (made "
                          "without it) are not reproduced bit for bit with it on. Rollouts stay eager."},
    )

    kv_cache_chunk: int = field(
        default=8,
        metadata={"help": "hf engine: the KV cache grows by this many positions at a time, written in place, "
                          "attention over the whole buffer with the unwritten positions masked (`pods.training."
                          "rollout.hf.ChunkedCache`); 1: transformers' DynamicCache, which concatenates (copies the "
                          "whole cache) at every token. Greedy and sampled tokens were identical on the tested models; "
                          "runs trained before it existed pin 1."},
    )
    sampling: str = field(
        default="inverse_cdf",
        metadata={"help": "How a rollout token is drawn from softmax(logits / temperature) (hf engines): inverse_cdf "
                          "(one uniform number per row, looked up in the cumulative probabilities) or multinomial "
                          "(`torch.multinomial`, an exponential variate per vocabulary entry on a CPU). The same "
                          "distribution, other draws from the same seed; runs trained before it existed pin "
                          "multinomial."},
    )
    fused_activation: bool = field(
        default=True,
        metadata={"help": "Run the policy's tanh GELU (`gelu_new`, GPT-2's; eight elementwise passes in transformers' "
                          "NewGELUActivation) as torch's fused kernel (transformers' GELUTanh, the same function), in "
                          "rollouts, update and evaluation. The numbers change in the last bits; runs trained before "
                          "it existed (the confirmation's, the ablations', the alternatives') pin it off. A policy "
                          "without that activation is left as it is."},
    )
    length_buckets: bool = field(
        default=True,
        metadata={"help": "torch and lora engines: group the update's rows into micro-batches by completion length, "
                          "split where the padding saved pays for another pass (`pods.training.update.torch_engine."
                          "length_buckets`), instead of in rollout order. The loss is the same sum up to the order of "
                          "floating-point additions; runs trained before it existed pin it off. The deepspeed engine "
                          "keeps equal micro-batches (its processes must make the same calls)."},
    )

    attn_implementation: str = field(
        default="auto",
        metadata={"help": "The policy's attention kernels (transformers' `attn_implementation`: eager, sdpa, "
                          "flash_attention_2, ...), in rollouts, update and evaluation. auto: `eager` on a CPU, the "
                          "model's own (sdpa) elsewhere. On a CPU at the embedded model's shapes (4 heads of 32, "
                          "sequences under 64) eager's two products and a softmax take half the time of torch's CPU "
                          "flash attention, whose blocking pays only on long sequences (decoding 1.1-1.2x faster, "
                          "benchmarks/roofline.py); "
                          "eager also keeps every [rows, heads, L, L] score matrix for the backward, so set sdpa "
                          "for long sequences on a CPU. On a GPU, sdpa's fused kernels win. The numbers change in "
                          "the last bits; runs trained before it existed pin sdpa."},
    )

    # ---- engine options: read by the engine named in the comment (its options class validates them)
    lora_rank: int = field(default=64, metadata={"help": "lora: LoRA rank r (paper: 64)."})
    lora_alpha: int = field(default=64,
                            metadata={"help": "lora: LoRA alpha; the update is scaled by alpha / r (paper: 64)."})
    lora_dropout: float = field(default=0.0, metadata={"help": "lora: dropout on the adapter input (paper: 0)."})
    lora_target_modules: str = field(
        default="q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj",
        metadata={"help": "lora: comma-separated module names that get an adapter, or `all-linear`."},
    )
    load_in_4bit: bool = field(
        default=False,
        metadata={"help": "lora: reload the base in 4-bit NF4 (bitsandbytes, CUDA or CPU) under the adapter."}
    )
    deepspeed_zero_stage: int = field(default=2, metadata={"help": "deepspeed: ZeRO stage 0-3 (paper: 2)."})
    deepspeed_offload_optimizer: bool = field(
        default=False, metadata={"help": "deepspeed: optimiser states in host memory (ZeRO-Offload)."}
    )
    dist_backend: str = field(
        default="", metadata={"help": "deepspeed: torch.distributed backend; empty: nccl on CUDA, gloo on CPU."}
    )
    vllm_gpu_memory_utilization: float = field(
        default=0.5, metadata={"help": "vllm: share of the GPU memory vLLM may take; the update gets the rest."}
    )
    vllm_sleep: bool = field(
        default=True, metadata={"help": "vllm: sleep between generations (free the KV cache, offload weights)."}
    )
    vllm_max_model_len: int | None = field(
        default=None, metadata={"help": "vllm: longest prompt + completion in tokens; null: max_new_tokens + 1024."}
    )
    vllm_enforce_eager: bool = field(
        default=False, metadata={"help": "vllm: skip CUDA-graph capture (slower decoding, faster start)."}
    )
    vllm_dtype: str = field(default="auto",
                            metadata={"help": "vllm: weight dtype of vLLM's copy (auto: the checkpoint's)."})

    # ---- derived values
    @property
    def method(self) -> str:
        return method_for(self.n, self.m, self.rule, self.dynamic_sampling, self.variant).name

    @property
    def variant(self) -> str:
        """The method variant these fields make (`pods.vocabulary.VARIANTS`): `cppo` with
        completion_allocation, `greso` with pre_rollout_filter, "" otherwise."""
        return "cppo" if self.completion_allocation else "greso" if self.pre_rollout_filter else ""

    @property
    def groups_per_prompt(self) -> int:
        return 1 if self.rollouts_per_prompt is None else self.rollouts_per_prompt // self.n

    @property
    def prompts_drawn(self) -> int:
        """Prompts a step generates for (before any dynamic-sampling refill): prompts_per_step, and
        with completion_allocation (CPPO) prompts_per_step * n / m."""
        return self.prompts_per_step * self.n // self.m if self.completion_allocation else self.prompts_per_step

    @property
    def groups_per_step(self) -> int:
        """Groups of n rollouts per optimiser step (each selected and normalised on its own)."""
        return self.prompts_drawn * self.groups_per_prompt

    @property
    def grad_accum(self) -> int:
        """Micro-batches per optimiser step."""
        return math.ceil(self.rollouts_trained / self.micro_batch)

    @property
    def rollouts_generated(self) -> int:
        return self.groups_per_step * self.n

    @property
    def rollouts_trained(self) -> int:
        return self.groups_per_step * self.m

    def model_path(self) -> Path:
        """The base model's local folder; a hub id resolves to its snapshot in the hub cache
        (`pods.training.hub`: downloaded when online, refused in one line when offline and not cached)."""
        from pods.training import hub

        base = self.base_model.format(benchmark=self.benchmark)
        return hub.resolve(base) if hub.is_hub_id(base) else Path(base)

    def output_dir(self) -> Path:
        return Path(
            self.run_dir.format(benchmark=self.benchmark, hardware=self.hardware, method=self.method, seed=self.seed)
        )

    def attention(self) -> str | None:
        """The attention implementation to load the policy with; None: the model's own."""
        if self.attn_implementation != "auto":
            return self.attn_implementation
        return "eager" if self.device.split(":")[0] == "cpu" else None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    # ---- validation
    def validate(self) -> "TrainConfig":
        """Check every field against the others and the registries that name its values; returns self.

        Reads the configuration only: it changes nothing (`resolve_train_config` then resolves `rule`
        to `identity` when m == n) and imports no engine (the engines' own option checks are
        `pods.training.engines`'). The first problem raises `ConfigError`, whose `key` names the field.
        """
        from pods.grpo import LOSS_AGGREGATIONS
        from pods.selection import SELECTION_RULES
        from pods.training.engines import ROLLOUT_ENGINES, UPDATE_ENGINES, check_report_to
        from pods.training.tasks import TASKS, task_class

        def need(ok: bool, key: str, what: str) -> None:
            if not ok:
                raise ConfigError(key, f"config key {key!r}: {what}, got {getattr(self, key)!r}")

        def choice(key: str, options) -> None:
            need(getattr(self, key) in options, key, f"must be one of {', '.join(sorted(options))}")

        choice("benchmark", TASKS)
        try:  # the options must fit the task's factory; checked now, the task is built later
            inspect.signature(TASKS[self.benchmark]).bind_partial(**self.task_options)
        except TypeError as exc:
            raise ConfigError("task_options",
                              f"config key 'task_options': {exc} (benchmark {self.benchmark!r})") from None
        need(self.n >= 1, "n", "must be >= 1")
        need(1 <= self.m <= self.n, "m", f"must satisfy 1 <= m <= n (n = {self.n})")
        choice("rule", SELECTION_RULES)
        need(self.rule != "identity" or self.m == self.n, "rule",
             f"'identity' keeps every rollout, so it needs m == n (n={self.n}, m={self.m})")
        need(self.m >= 2, "m", "must be >= 2 (a group advantage needs two rewards)")
        need(self.max_generation_rounds >= 1, "max_generation_rounds", "must be >= 1")
        # the deepspeed engine's batch is fixed when it is built; a dynamically sampled step's is not
        need(not (self.dynamic_sampling and self.update_engine == "deepspeed"), "dynamic_sampling",
             "runs on one process (update_engine torch or lora), not with deepspeed")
        choice("normalize_over", NORMALIZE_OVER)
        if self.completion_allocation:  # CPPO (docs/field.md)
            need(self.rule == CPPO_RULE and self.m < self.n, "completion_allocation",
                 f"is CPPO's: it keeps m < n by rule {CPPO_RULE!r} (rule {self.rule!r}, n={self.n}, m={self.m})")
            need(self.normalize_over == "all", "normalize_over",
                 "must be 'all' with completion_allocation (CPPO's advantages are over all n, before pruning)")
            need(self.prompts_per_step * self.n % self.m == 0, "prompts_per_step",
                 f"times n must be a multiple of m with completion_allocation (the step draws prompts_per_step * "
                 f"n / m prompts; n={self.n}, m={self.m})")
            need(not self.dynamic_sampling and not self.pre_rollout_filter, "completion_allocation",
                 "is CPPO's alone: not with dynamic_sampling or pre_rollout_filter")
        if self.pre_rollout_filter:  # GRESO (docs/field.md)
            need(self.dynamic_sampling, "pre_rollout_filter",
                 "is GRESO's filter on top of DAPO's dynamic sampling: it needs dynamic_sampling true")
            for key in ("filter_p_easy", "filter_p_hard", "filter_target_zero_variance", "filter_p_min",
                        "filter_p_max", "filter_keep_floor", "filter_p_step"):
                need(0 <= getattr(self, key) <= 1, key, "must be in [0, 1]")
            need(self.filter_keep_floor > 0, "filter_keep_floor", "must be > 0 (every prompt keeps a chance)")
            need(self.filter_p_min <= self.filter_p_max, "filter_p_min", f"must be <= filter_p_max "
                                                                         f"({self.filter_p_max})")
        need(not ((self.completion_allocation or self.pre_rollout_filter) and self.rollouts_per_prompt is not None),
             "rollouts_per_prompt", "must be null with completion_allocation or pre_rollout_filter (one group "
                                    "per prompt)")
        choice("loss_agg", LOSS_AGGREGATIONS)
        choice("rollout_engine", ROLLOUT_ENGINES)
        choice("update_engine", UPDATE_ENGINES)
        need(self.seed >= 0, "seed", "must be >= 0")
        seeds = task_class(self.benchmark).seed_limit
        need(seeds is None or self.seed < seeds, "seed",
             f"task {self.benchmark!r} takes seeds in [0, {seeds}) (each seed's training split is generated "
             f"from its own block of generator seeds, kept apart from the test split's)")
        choice("precision", PRECISIONS)
        choice("optimizer", ("adamw", "adamw_8bit"))
        need(self.optimizer == "adamw" or self.update_engine == "lora", "optimizer",
             "adamw_8bit is implemented by update_engine 'lora' only")
        need(not self.compile_update or self.update_engine == "torch", "compile_update",
             f"is implemented by update_engine 'torch' only (update_engine is {self.update_engine!r})")
        # ZeRO-3 gathers weights inside every forward, so its processes decode in lockstep (hf does, hf_static not)
        need(not (self.rollout_engine == "hf_static" and self.update_engine == "deepspeed"
                  and self.deepspeed_zero_stage == 3), "rollout_engine", "cannot run beside DeepSpeed ZeRO-3 (use hf)")
        choice("sampling", SAMPLINGS)
        choice("attn_implementation", ATTENTIONS)
        for key in ("prompts_per_step", "micro_batch", "max_new_tokens", "eval_repeats", "eval_batch", "num_threads",
                    "kv_cache_chunk"):
            need(getattr(self, key) >= 1, key, "must be >= 1")
        for key in ("lr", "temperature", "eval_temperature"):
            need(getattr(self, key) > 0, key, "must be > 0")
        for key in ("weight_decay", "max_grad_norm", "beta", "eps_low", "eps_high", "checkpoint_every_s",
                    "lr_warmup_steps"):
            need(getattr(self, key) >= 0, key, "must be >= 0")
        for key in ("adam_beta1", "adam_beta2"):
            need(0 <= getattr(self, key) < 1, key, "must be in [0, 1)")
        need(self.max_train_time_s is None or self.max_train_time_s > 0, "max_train_time_s", "must be > 0 or null")
        need(self.max_steps is None or self.max_steps >= 1, "max_steps", "must be >= 1 or null")
        need(self.step_cost_s is None or (math.isfinite(self.step_cost_s) and self.step_cost_s > 0), "step_cost_s",
             "must be a number > 0 or null")
        need(self.rollouts_per_prompt is None
             or (self.rollouts_per_prompt >= self.n and self.rollouts_per_prompt % self.n == 0),
             "rollouts_per_prompt", f"must be null or a multiple of n = {self.n}")
        need(self.max_train_time_s is not None or self.max_steps is not None, "max_steps",
             "needs a budget: set max_steps or max_train_time_s")
        need(self.eval_every_s is None or self.eval_every_s > 0, "eval_every_s", "must be > 0 or null")
        need(self.eval_every_steps is None or self.eval_every_steps >= 1, "eval_every_steps", "must be >= 1 or null")
        need(self.eval_items is None or self.eval_items >= 1, "eval_items", "must be >= 1 or null")
        need(not (self.eval_greedy and self.eval_repeats > 1), "eval_repeats",
             "must be 1 with eval_greedy (repeats would be identical)")
        need(check_report_to(self.report_to) is None, "report_to", check_report_to(self.report_to) or "")
        for key in ("hardware", "run_dir", "base_model", "device"):
            need(bool(getattr(self, key)), key, "must not be empty")
        profiles = Path(self.hardware_dir)
        need(not profiles.is_dir() or (profiles / f"{self.hardware}.yaml").is_file(), "hardware",
             f"no profile {profiles / (self.hardware + '.yaml')} (profiles there: "
             f"{', '.join(sorted(p.stem for p in profiles.glob('*.yaml'))) if profiles.is_dir() else ''})")
        return self


class ConfigError(ValueError):
    """A config value a run cannot use. `key` names the field as data, so that a caller can say
    which file or layer set it without reading the message."""

    def __init__(self, key: str, message: str):
        super().__init__(message)
        self.key = key


def variant_settings(method: Method) -> dict[str, Any]:
    """The TrainConfig keys a method name decides beyond n, m, rule and dynamic_sampling: for
    `cppo-` completion_allocation and CPPO's normalisation over all n, for `greso-` the filter;
    nothing for GRPO, PODS and DAPO (a run's identity, `pods.study.run_configs`; `pods cost`)."""
    if method.variant == "cppo":
        return {"completion_allocation": True, "normalize_over": "all"}
    if method.variant == "greso":
        return {"pre_rollout_filter": True}
    return {}


_FIELDS = {f.name: f for f in dataclasses.fields(TrainConfig)}


def config_help() -> str:
    """Every config key with its type, default and help, for `pods train --help`."""
    lines = ["config keys (KEY=VALUE, or in the --config YAML), with their defaults:"]
    for f in dataclasses.fields(TrainConfig):
        default = f.default_factory() if f.default is dataclasses.MISSING else f.default
        lines.append(f"  {f.name} = {default!r}  ({str(f.type)})")
        lines.append(f"      {f.metadata.get('help', '')}")
    return "\n".join(lines)


def coerce_field(fields: Mapping[str, dataclasses.Field], key: str, value: Any, word: str = "config key") -> Any:
    """One value checked against its dataclass field's annotation (YAML already typed it): ints pass
    as floats, and `1e-3` (which YAML 1.1, PyYAML's dialect, reads as a string) as the float it is
    in YAML 1.2. Shared by every config of the package (TrainConfig, WarmStartConfig)."""
    annotation = str(fields[key].type)
    optional = "None" in annotation
    if value is None:
        if optional:
            return None
        raise ConfigError(key, f"{word} {key!r} must not be null")
    base = annotation.replace(" | None", "")
    if base == "bool":
        if isinstance(value, bool):
            return value
    elif base == "int":
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
    elif base == "float":
        number = None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            number = float(value)
        elif isinstance(value, str):  # PyYAML reads `1e-4` (no dot) as a string
            try:
                number = float(value)
            except ValueError:
                pass
        if number is not None:
            if not math.isfinite(number):
                raise ConfigError(key, f"{word} {key!r} must be a finite number, got {value!r}")
            return number
    elif base == "str":
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
    elif base == "dict":
        if isinstance(value, dict):
            return value
    elif base == "list":
        if isinstance(value, str):  # `report_to=tensorboard`: a list of one
            return [value] if value else []
        if isinstance(value, list) and all(isinstance(item, str) for item in value):
            return value
    raise ConfigError(key, f"{word} {key!r} must be {base}{' or null' if optional else ''}, got {value!r}")


def check_field_name(fields: Mapping[str, dataclasses.Field], key: str, where: str, word: str = "config key") -> None:
    if key not in fields:
        close = difflib.get_close_matches(key, fields, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(f"unknown {word} {key!r} in {where}{hint}")


def _coerce(key: str, value: Any) -> Any:
    return coerce_field(_FIELDS, key, value)


def _check_key(key: str, where: str) -> None:
    check_field_name(_FIELDS, key, where)


def parse_value(raw: str) -> Any:
    """One override value as the command line carries it, read as a YAML scalar (or flow list/map)."""
    import yaml

    return yaml.safe_load(raw) if raw.strip() else ""


def parse_overrides(overrides: list[str], fields: Mapping[str, dataclasses.Field] | None = None,
                    word: str = "config key") -> dict[str, Any]:
    """`["n=64", "eval_every_s=null"]` -> dict, values parsed as YAML scalars, keys checked against
    `fields` (default: TrainConfig's)."""
    parsed: dict[str, Any] = {}
    for item in overrides:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"override {item!r} is not of the form key=value")
        check_field_name(fields or _FIELDS, key, "overrides", word)
        parsed[key] = parse_value(raw)
    return parsed


def read_config_file(path: str | Path) -> dict[str, Any]:
    """A TrainConfig YAML file (a flat mapping of keys to values), keys checked."""
    import yaml

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"config file {path} not found")
    try:
        loaded = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ValueError(f"config file {path} is not valid YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(loaded, dict):
        raise ValueError(f"config file {path} must hold a mapping of keys to values")
    for key in loaded:
        _check_key(str(key), str(path))
    return loaded


def resolve_train_config(layers: Sequence[tuple[str, Mapping[str, Any]]], *, cite: bool = True) -> TrainConfig:
    """TrainConfig from layers of key -> value, later layers winning, validated.

    Each layer is (where it comes from, its values). An unknown key names its layer; with `cite`, a
    bad value names the layer that set it last (`pods train` has only its file and its overrides,
    and says so without it).
    """
    from pods.training.engines import check_engine_options

    values: dict[str, Any] = {}
    origin: dict[str, str] = {}
    for where, layer in layers:
        for key, value in layer.items():
            _check_key(str(key), where)
            values[key], origin[key] = value, where
    try:
        cfg = TrainConfig(**{key: _coerce(key, value) for key, value in values.items()}).validate()
        # the rule the run runs: `identity` when m == n (every rule keeps all n then)
        cfg = dataclasses.replace(cfg, rule=kept_rule(cfg.n, cfg.m, cfg.rule))
        return check_engine_options(cfg)  # and the chosen engines' own checks of their options
    except ConfigError as exc:
        if cite and exc.key in origin:
            raise ConfigError(exc.key, f"{exc} (set in {origin[exc.key]})") from None
        raise


def load_train_config(path: str | Path | None = None, overrides: list[str] | dict | None = None) -> TrainConfig:
    """Read a YAML config (flat mapping of TrainConfig keys), apply overrides, validate.

    Raises ValueError (or FileNotFoundError) with the key or file named, before any compute.
    """
    layers: list[tuple[str, Mapping[str, Any]]] = []
    if path is not None:
        layers.append((str(path), read_config_file(path)))
    if isinstance(overrides, dict):
        layers.append(("overrides", overrides))
    elif overrides:
        layers.append(("overrides", parse_overrides(list(overrides))))
    return resolve_train_config(layers, cite=False)
