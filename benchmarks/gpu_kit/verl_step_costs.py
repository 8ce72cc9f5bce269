"""Seconds per step by phase of GRPO n=16 and PODS 64->16 as verl runs them, PODS through pods.integrations.verl.

    python benchmarks/gpu_kit/verl_step_costs.py --out costs-verl.json --hardware h100-verl   # one GPU
    python benchmarks/gpu_kit/verl_step_costs.py --arch tiny --device cpu --steps 1 ...      # the CPU dry run

Both arms run verl's own driver, `RayPPOTrainer.__init__` and `fit` (verl 0.9.1, `trainer.use_v1=False`):
GRPO n=16 with verl's `RayPPOTrainer`, PODS with `PODSRayPPOTrainer` (64 generated, 16 kept by
max-variance inside `_balance_batch`). Ray's worker groups are replaced by one in-process worker on
the device that does the work verl's FSDP workers and rollout servers would do: sampling (transformers'
`generate`, every completion exactly `--completion-tokens` long), the log-prob passes (old policy and
reference, on the no-padding layout verl sends) and the clipped GRPO update with the k3 KL term
(`pods.grpo.policy_loss`, beta 0.04, `ppo_mini_batch_size` one prompt, micro-batch 16). The model
is built from an architecture with random weights (no download); rewards are Bernoulli(0.5) draws put
into `rm_scores` as verl's reward loop does while generating. So this times verl's data path and
PODS's drop with the compute of a single-GPU run of the same shapes; it does not time verl's
vLLM/SGLang servers, Ray dispatch or FSDP sharding, which need verl's GPU stack.

Phases are verl's own timers (`timing_s/*`): generate = gen, reward = reward, logprob = old_log_prob +
ref, update = adv + update_actor, select = the rest of `step` (the driver's bookkeeping: verl's
batch balancing and, in the PODS arm, the drop). `--out` writes the phase-cost file `pods project
--costs` reads. Needs verl importable (scripts/verl_env.sh builds such an environment).
"""
from __future__ import annotations

import argparse
import platform
import statistics
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout, whether or not pods is installed

from cost_report import report  # noqa: E402  (beside this script)

from pods.grpo import policy_loss  # noqa: E402
from pods.vocabulary import STEP_PHASES as PHASES  # noqa: E402

ARMS = {"GRPO n=16": (16, 16), "PODS n=64->16": (64, 16)}
ARCHS = {  # Qwen2.5-0.5B-Instruct's config.json (architecture only); `tiny` is its shape at toy size
    "qwen2.5-0.5b": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                         num_key_value_heads=2, vocab_size=151936, max_position_embeddings=32768,
                         rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True),
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=512, max_position_embeddings=2048, tie_word_embeddings=True),
}
BETA, MICRO_BATCH = 0.04, 16


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arch", choices=sorted(ARCHS), default="qwen2.5-0.5b")
    p.add_argument("--device", default="cuda")
    p.add_argument("--prompt-tokens", type=int, default=200)
    p.add_argument("--completion-tokens", type=int, default=512)
    p.add_argument("--steps", type=int, default=2, help="timed steps per arm (after one untimed)")
    p.add_argument("--out", default=None)
    p.add_argument("--hardware", default=platform.node())
    return p.parse_args()


class DeviceWorker:
    """What verl's driver calls on its worker groups, rollout manager and checkpoint manager, done in
    this process on one device with a plain transformers model."""

    def __init__(self, args):
        from transformers import Qwen2Config, Qwen2ForCausalLM

        self.args, self.device = args, torch.device(args.device)
        self.dtype = torch.bfloat16 if args.device.startswith("cuda") else torch.float32
        torch.manual_seed(0)
        with torch.device(self.device):
            self.model = Qwen2ForCausalLM(Qwen2Config(**ARCHS[args.arch])).to(self.dtype)
            self.reference = Qwen2ForCausalLM(Qwen2Config(**ARCHS[args.arch])).to(self.dtype).eval()
        self.reference.load_state_dict(self.model.state_dict())
        self.model.generation_config.eos_token_id = None  # every completion runs to --completion-tokens
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-6)
        self.rng = np.random.default_rng(0)
        self._dispatch_info = {"actor": [0]}  # one data-parallel rank (verl's _get_dp_size reads this)

    # -- the rollout manager: n completions per prompt, scored as verl's reward loop scores them --
    @torch.no_grad()
    def generate_sequences(self, gen_batch):
        from verl import DataProto

        P, R, rows = self.args.prompt_tokens, self.args.completion_tokens, len(gen_batch)
        uids = gen_batch.non_tensor_batch["uid"]
        prompt_of = {uid: self.rng.integers(1, ARCHS[self.args.arch]["vocab_size"], P) for uid in dict.fromkeys(uids)}
        prompts = torch.as_tensor(np.stack([prompt_of[uid] for uid in uids]), device=self.device)
        self.model.eval()
        out = self.model.generate(prompts, attention_mask=torch.ones_like(prompts), do_sample=True, temperature=0.9,
                                  max_new_tokens=R, min_new_tokens=R, pad_token_id=0)
        responses = out[:, P:].cpu()
        assert responses.shape[1] == R
        input_ids = torch.cat([prompts.cpu(), responses], dim=1)
        attention_mask = torch.ones_like(input_ids)
        rm_scores = torch.zeros(rows, R)
        rm_scores[:, -1] = torch.as_tensor(self.rng.integers(0, 2, rows), dtype=torch.float32)
        return DataProto.from_single_dict({
            "prompts": prompts.cpu(), "responses": responses, "input_ids": input_ids,
            "attention_mask": attention_mask, "position_ids": torch.arange(P + R).expand(rows, -1).clone(),
            "response_mask": torch.ones(rows, R, dtype=torch.long), "rm_scores": rm_scores,
            "multi_modal_inputs": np.array([{} for _ in range(rows)], dtype=object),
        }, meta_info={"timing": {}})

    # -- the actor and reference workers: verl sends the no-padding layout, prompts and responses beside it --
    def _response_logprobs(self, model, prompts, responses) -> torch.Tensor:
        ids = torch.cat([prompts, responses], dim=1).to(self.device)
        logits = model(input_ids=ids).logits[:, prompts.shape[1] - 1:-1].float()
        return torch.log_softmax(logits, dim=-1).gather(-1, responses.to(self.device)[..., None]).squeeze(-1)

    @torch.no_grad()
    def _log_probs(self, model, td):
        from verl.utils import tensordict_utils as tu

        chunks = [self._response_logprobs(model, td["prompts"][i:i + MICRO_BATCH], td["responses"][i:i + MICRO_BATCH])
                  for i in range(0, len(td), MICRO_BATCH)]
        response = torch.cat(chunks).cpu()  # [rows, R]: every token valid (no padding in these batches)
        # verl's layout: one value per token of each sequence, the log-prob of the token after it
        P = td["prompts"].shape[1]
        flat = torch.cat([torch.zeros(len(td), P - 1), response, torch.zeros(len(td), 1)], dim=1).reshape(-1)
        assert flat.shape[0] == td["input_ids"].values().shape[0]
        return tu.get_tensordict({"log_probs": flat, "entropy": torch.zeros_like(flat)},
                                 non_tensor_dict={"metrics": {"mfu": 0.0}})

    def compute_log_prob(self, td):
        self.model.eval()
        return self._log_probs(self.model, td)

    def compute_ref_log_prob(self, td):
        return self._log_probs(self.reference, td)

    def update_actor(self, td):
        from verl.utils import tensordict_utils as tu

        self.model.train()
        mini = tu.get(td, "mini_batch_size")
        metrics = []
        for start in range(0, len(td), mini):
            self.optimizer.zero_grad(set_to_none=True)
            for i in range(start, min(start + mini, len(td)), MICRO_BATCH):
                rows = slice(i, min(i + MICRO_BATCH, start + mini))
                mask = td["response_mask"][rows].to(self.device).float()
                logprobs = self._response_logprobs(self.model, td["prompts"][rows], td["responses"][rows])
                advantages = (td["advantages"][rows].to(self.device) * mask).sum(1) / mask.sum(1)
                loss, info = policy_loss(logprobs, td["old_log_probs"][rows].to(self.device), advantages, mask,
                                         ref_logprobs=td["ref_log_prob"][rows].to(self.device), beta=BETA,
                                         total_sequences=mini)
                loss.backward()
                metrics.append(loss.item())
            self.optimizer.step()
        return tu.get_tensordict({"loss": torch.zeros(1)},
                                 non_tensor_dict={"metrics": {"mfu": 0.0, "pg_loss": statistics.mean(metrics)}})

    # -- the checkpoint manager (one process: the sampler is the policy) and the resource pool --
    def update_weights(self, step):
        pass

    def sleep_replicas(self):
        pass

    def get_n_gpus(self):
        return 1


class Prompts(torch.utils.data.Dataset):
    def __init__(self, steps):
        self.steps = steps

    def __len__(self):
        return self.steps

    def __getitem__(self, index):
        return {"raw_prompt": [{"role": "user", "content": str(index)}], "dummy_tensor": torch.tensor([0]),
                "data_source": "random", "index": index, "extra_info": {}}


def run_arm(args, n: int, m: int, workdir: Path) -> list[dict[str, float]]:
    import verl.utils.tracking
    from hydra import compose, initialize_config_dir
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer, Role
    from verl.utils.dataset.rl_dataset import collate_fn

    import pods.integrations.verl as pods_verl

    logged = []

    class Tracking:  # verl's logger: keep each step's metrics here
        def __init__(self, **_):
            pass

        def log(self, data, step):
            logged.append(data)

    verl.utils.tracking.Tracking = Tracking
    overrides = [
        f"actor_rollout_ref.rollout.n={n}", *([f"pods.m={m}"] if m < n else []), "data.train_batch_size=1",
        "actor_rollout_ref.actor.ppo_mini_batch_size=1",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={MICRO_BATCH}",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={MICRO_BATCH}",
        f"actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu={MICRO_BATCH}", "actor_rollout_ref.model.path=random",
        "actor_rollout_ref.actor.use_kl_loss=True", f"actor_rollout_ref.actor.kl_loss_coef={BETA}",
        "trainer.n_gpus_per_node=1", "trainer.nnodes=1", "trainer.total_epochs=1", "trainer.val_before_train=False",
        "trainer.test_freq=-1", "trainer.save_freq=-1", "trainer.logger=[console]", "data.dataloader_num_workers=0",
        f"trainer.default_local_dir={workdir / 'checkpoints'}",
    ]
    with initialize_config_dir(config_dir=str(Path(pods_verl.__file__).parent / "verl_config"), version_base=None):
        config = compose("pods_ppo_trainer", overrides=overrides)
    trainer_class = pods_verl.PODSRayPPOTrainer if m < n else RayPPOTrainer
    worker = DeviceWorker(args)
    trainer = trainer_class(config=config, tokenizer=None, role_worker_mapping={Role.ActorRollout: object},
                            resource_pool_manager=worker, train_dataset=Prompts(args.steps + 1),
                            val_dataset=Prompts(1), collate_fn=collate_fn)
    trainer.actor_rollout_wg = trainer.ref_policy_wg = worker
    trainer.async_rollout_manager = trainer.checkpoint_manager = worker
    trainer.fit()
    steps = []
    for metrics in logged[1:]:  # the first step warms the kernels up
        t = {k.removeprefix("timing_s/"): v for k, v in metrics.items() if k.startswith("timing_s/")}
        phases = {"generate": t["gen"], "reward": t["reward"], "logprob": t["old_log_prob"] + t.get("ref", 0.0),
                  "update": t["adv"] + t["update_actor"]}
        phases["select"] = t["step"] - sum(phases.values())
        steps.append({**phases, "step": t["step"], "trained": metrics.get("pods/rollouts_trained", n)})
    assert steps and all(s["trained"] == m for s in steps), steps
    return steps


def main() -> int:
    import tempfile

    args = parse_args()
    rows = {}
    with tempfile.TemporaryDirectory() as work:
        for label, (n, m) in ARMS.items():
            steps = run_arm(args, n, m, Path(work))
            rows[label] = {key: statistics.mean(s[key] for s in steps) for key in (*PHASES, "step")}
            print(f"{label}: " + ", ".join(f"{k} {v:.3f} s" for k, v in rows[label].items()), flush=True)
    import verl

    print(f"\n{args.arch}, verl {verl.__version__} driver, 1 prompt/step, {args.prompt_tokens} prompt + "
          f"{args.completion_tokens} completion tokens, micro-batch {MICRO_BATCH}, {args.steps} timed steps")
    report(rows, ARMS, PHASES, out=args.out, hardware=args.hardware, device=args.device, settings={
        "trainer": f"verl {verl.__version__} RayPPOTrainer.fit, pods.integrations.verl", "arch": args.arch,
        "weights": "random", "update": "full fine-tuning, AdamW", "prompts_per_step": 1,
        "prompt_tokens": args.prompt_tokens, "completion_tokens": args.completion_tokens, "micro_batch": MICRO_BATCH,
        "beta": BETA, "timed_steps": args.steps})
    grpo, pods = (rows[k]["step"] for k in ARMS)
    print(f"step-cost ratio PODS/GRPO (verl): {pods / grpo:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
