#!/usr/bin/env bash
# verl's GSM8K GRPO recipe with PODS: 64 rollouts generated per prompt, the 16 with the most varied
# rewards trained on (the paper's GSM8K setting, docs/paper.md 2.1.6), through pods.integrations.verl.
# Runs on a GPU node in the environment of the `verl` extra with verl's GPU stack (vLLM, FSDP):
#
#   python3 examples/data_preprocess/gsm8k.py --local_save_dir ~/data/gsm8k   # verl's own script (verl repository, v0.9.1)
#   bash examples/verl_gsm8k_pods.sh                                         # 8 GPUs, Qwen2.5-3B-Instruct
#   NGPUS=1 MODEL=Qwen/Qwen2.5-0.5B-Instruct bash examples/verl_gsm8k_pods.sh trainer.total_epochs=1
#
# Everything but the three `pods`-side lines is verl's GRPO example for GSM8K; any verl key can be
# appended on the command line. GRPO for comparison: the same command with `pods.m` and n both 16 is
# refused (m must be below n); run `python3 -m verl.trainer.main_ppo trainer.use_v1=False` with the
# same keys less the `pods.*` ones and `actor_rollout_ref.rollout.n=16`.
set -euo pipefail
data=${DATA:-$HOME/data/gsm8k}
args=(
    algorithm.adv_estimator=grpo
    data.train_files="$data/train.parquet"
    data.val_files="$data/test.parquet"
    data.train_batch_size=64
    data.max_prompt_length=512
    data.max_response_length=1024
    data.filter_overlong_prompts=True
    data.truncation=error
    actor_rollout_ref.model.path="${MODEL:-Qwen/Qwen2.5-3B-Instruct}"
    actor_rollout_ref.model.use_remove_padding=True
    actor_rollout_ref.model.enable_gradient_checkpointing=True
    actor_rollout_ref.actor.optim.lr=1e-6
    actor_rollout_ref.actor.ppo_mini_batch_size=16
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8
    actor_rollout_ref.actor.use_kl_loss=True
    actor_rollout_ref.actor.kl_loss_coef=0.001
    actor_rollout_ref.actor.kl_loss_type=low_var_kl
    actor_rollout_ref.actor.entropy_coeff=0
    actor_rollout_ref.actor.fsdp_config.param_offload=False
    actor_rollout_ref.actor.fsdp_config.optimizer_offload=False
    actor_rollout_ref.rollout.name=vllm
    actor_rollout_ref.rollout.tensor_model_parallel_size=1
    actor_rollout_ref.rollout.gpu_memory_utilization=0.6
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=16
    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=16
    actor_rollout_ref.ref.fsdp_config.param_offload=True
    algorithm.use_kl_in_reward=False
    trainer.use_v1=False
    trainer.balance_batch=True
    trainer.critic_warmup=0
    trainer.logger=[console]
    trainer.project_name=pods_verl_gsm8k
    trainer.experiment_name="pods-max_variance-n64-m16"
    trainer.n_gpus_per_node="${NGPUS:-8}"
    trainer.nnodes=1
    trainer.save_freq=-1
    trainer.test_freq=5
    trainer.total_epochs=15
    # PODS: n is verl's own key; m and the rule are the plugin's
    actor_rollout_ref.rollout.n=64
    pods.m=16
    pods.rule=max_variance
)
exec "${PYTHON:-python3}" -m pods.integrations.verl "${args[@]}" "$@"
