"""Max-variance selection: ours (vectorised prefix sums) vs the authors' per-group scan vs brute force.

Run: python benchmarks/selection.py [--groups 512] [--repeats 5]

Prints one table measured side by side in this run: milliseconds per call for a batch of G groups,
the speedup over the authors' scan, and whether every method found subsets of equal variance.
The authors' scan (their trainer's selection block, docs/paper.md section 1.3) sorts each group, then
recomputes the variance of each top-i + bottom-(m-i) candidate: O(m^2) per group after the sort,
in a Python loop over groups. Brute force enumerates all C(n, m) subsets where that is feasible.
"""
from __future__ import annotations

import argparse
import itertools
import math
import time

import torch

from pods.selection import select

BRUTE_FORCE_LIMIT = 50_000  # subsets per group


def authors_scan(rewards: torch.Tensor, m: int) -> torch.Tensor:
    kept = []
    for group in rewards:
        sorted_rewards, order = group.sort(descending=True)
        best = order[:m]
        best_var = sorted_rewards[:m].var()
        for i in range(m):
            candidate = torch.cat([sorted_rewards[:i], sorted_rewards[i - m :]])
            var = candidate.var()
            if var > best_var:
                best_var = var
                best = torch.cat([order[:i], order[i - m :]])
        kept.append(best)
    return torch.stack(kept)


def brute_force(rewards: torch.Tensor, m: int) -> torch.Tensor:
    subsets = torch.tensor(list(itertools.combinations(range(rewards.shape[1]), m)))
    variances = rewards[:, subsets].var(dim=-1)  # [G, subsets]
    return subsets[variances.argmax(dim=1)]


def best_of(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def subset_variance(rewards: torch.Tensor, kept: torch.Tensor) -> torch.Tensor:
    return torch.gather(rewards, 1, kept).var(dim=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    generator = torch.Generator().manual_seed(0)

    print(f"G = {args.groups} groups, continuous rewards (correctness + format-like terms), one thread, best of "
          f"{args.repeats}")
    header = (f"{'n':>4} {'m':>4} | {'ours ms':>9} | {'authors ms':>11} {'speedup':>8} | {'brute ms':>10} "
              "| same variance")
    print(header)
    print("-" * len(header))
    for n, m in [(16, 4), (64, 16), (256, 64)]:
        correct = (torch.rand(args.groups, n, generator=generator) < 0.5).double()
        rewards = correct + 0.2 * torch.rand(args.groups, n, generator=generator, dtype=torch.float64) * (1 - correct)

        ours = select(rewards, m, "max_variance")
        t_ours = best_of(lambda: select(rewards, m, "max_variance"), args.repeats)
        theirs = authors_scan(rewards, m)
        t_theirs = best_of(lambda: authors_scan(rewards, m), max(1, args.repeats // 2))
        agree = torch.allclose(subset_variance(rewards, ours), subset_variance(rewards, theirs), rtol=1e-9)

        if math.comb(n, m) <= BRUTE_FORCE_LIMIT:
            brute = brute_force(rewards, m)
            t_brute = f"{1e3 * best_of(lambda: brute_force(rewards, m), 1):10.1f}"
            agree &= torch.allclose(subset_variance(rewards, ours), subset_variance(rewards, brute), rtol=1e-9)
        else:
            t_brute = f"{'C(n,m)=' + f'{math.comb(n, m):.0e}':>10}"
        print(
            f"{n:>4} {m:>4} | {1e3 * t_ours:9.2f} | {1e3 * t_theirs:11.1f} {t_theirs / t_ours:7.0f}x |"
            f" {t_brute} | {'yes' if agree else 'NO'}"
        )


if __name__ == "__main__":
    main()
