"""The paper's figures and speedups, regenerated from the authors' released results.

The authors released every per-checkpoint evaluation behind the paper in
`github.com/YixuanEvenXu/pods` at commit 187f43b, folder `results/` (Apache-2.0). This module
  1. downloads that folder at the pinned commit, checking each file's sha256 (`download_release`),
  2. imports it into the run schema of docs/contracts.md (`import_release`), so that
  3. our own `pods.study.analysis` and `pods.study.plots` produce the paper's figures and tables from it
     (`build_paper_outputs`): nothing here re-implements the authors' aggregation.

Regenerate (offline, from a local copy of the release, e.g. the one CI uses):
    snakemake --cores all paper_figures --config paper_results_dir=../shared/paper-results
or online (downloads the pinned commit's results/ into resources/paper/release, checksummed):
    snakemake --cores all paper_figures
or without Snakemake:
    pods paper import --src ../shared/paper-results --out resources/paper
    pods paper figures --runs resources/paper --out figures/paper

How the release maps onto run directories `<out>/runs/{benchmark}/{hardware}/{method}/seed{k}`:
  Instruct-GSM8K[-MaxR|-Rand]-512-{n}-{m}-Run{k}.json  gsm8k/l40s-lora/<method>/seed{k}
  Instruct-MATH-NF-512-{n}-{m}-Run{k}.json             math/l40s-lora/<method>/seed{k}
  Instruct-Llama-512-{n}-{m}-0.04-Run{k}.json          gsm8k-llama/l40s-lora/<method>/seed{k}
  {h100s,a100s}-{acc,length}.csv, run <P>-s{k}-p8-n{n}-m{m}-ga{GA}
                                                      gsm8k/{h100x8,a100x8}-zero2/<method>/seed{k}
`gsm8k-llama` is GSM8K trained with the Llama-3.2 Instruct base model (beta = 0.04, the reward of
the authors' Llama commit); the model of every imported run is in its config.yaml. `math` is the
MATH training set with the correctness-only reward ("MATH-NF"). Rules: no suffix = max_variance,
MaxR = max_reward, Rand = random; n = m is vanilla GRPO (`grpo-n{n}-m{n}`).

Single-GPU runs: the k-th checkpoint (in step order) becomes train_time_s = k x 1800 (k x 600 for
Llama), the nominal save time the authors plot; one evaluation row per eval set the checkpoint
holds (gsm8k, math500, amc23 for Qwen; gsm8k only for Llama) with `accuracy` = mean over the 5
repeats of `ans_acc` (`both_acc` for Llama, as the paper plots it; all three metrics are kept as
extra fields); the base model is the t = 0 row of each eval set the run evaluates later. An eval
set found only in the base file (base-llama.json's amc23 and math500) is left out and named in
the import report. Every checkpoint is imported, also past the horizon and where a run has fewer
than its siblings (one released Llama run has 11 of 12); figures and tables stop at the horizon,
which every released run reaches (a run ending before it would enter the curves with its last
checkpoint, the nearest evaluation, where the authors' script averages the runs present).
summary.json carries s_per_step = horizon / global step of the horizon checkpoint (6 h; 1.5 h for
Llama), the authors' "seconds per training step".
Multi-GPU runs: one row per wandb evaluation with train_time_s = `eval/time` (evaluation time
excluded), `step` = the optimiser step inferred from wandb's `_step` log-call counter
(`inferred_optimizer_steps`) and `wandb_step` = `_step`. Their s_per_step is training time /
inferred steps at the evaluation nearest 30 min; the authors' bar-chart formula 1800 x GA /
`_step` at 30 min is kept as s_per_step_authors.
A seed that appears in only one of the acc/length exports is left out and named in the import
report, as the authors' script intersects them too. wandb writes one row per logged evaluation
with every other run's cells empty; empty cells are no evaluation. A final evaluation that
follows no optimiser step (three A100 runs: training stopped before the next step, the weights are
those evaluated before) is left out and named in the report: the run schema has one evaluation
per step, and in every released run it lies past 30 min, where no grid point takes it.
"""
