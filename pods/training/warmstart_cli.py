"""`pods warmstart`'s command line: light to import, so that `--help` answers at once and the CPU
kernel pin (pods.training.warmstart_config.CPU_KERNELS) is in the environment before torch loads
and picks its kernels for good."""
from __future__ import annotations

import logging
import os

from pods.training.warmstart_config import CPU_KERNELS, KERNELS_VARIABLE, load_warmstart_config


def add_arguments(parser) -> None:
    """`pods warmstart`: torch is imported only after the options are read, so that the kernel
    pin applies and --help answers at once."""
    parser.add_argument("--config", help="YAML file with WarmStartConfig fields")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="override a config field")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.epilog = (f"The base is built on the {CPU_KERNELS.upper()} kernel path, as the workflow builds the embedded "
                     f"bases, unless {KERNELS_VARIABLE} is set.")
    parser.set_defaults(func=_main)


def _main(args) -> int:
    cfg = load_warmstart_config(args.config, args.overrides)  # bad input: one line, before torch loads
    wanted = os.environ.setdefault(KERNELS_VARIABLE, CPU_KERNELS)
    # transformers' schedulers import peft, which imports bitsandbytes, which warns that it found no
    # fused 4-bit CPU kernel: the warm start has no 4-bit weights, so the line says nothing here
    logging.getLogger("bitsandbytes.backends.cpu.ops").setLevel(logging.ERROR)
    import torch

    from pods.training.warmstart import warmstart

    took = torch.backends.cpu.get_cpu_capability()
    if took.lower() != wanted.lower():
        raise ValueError(f"{KERNELS_VARIABLE}={wanted}: torch takes its {took} kernels on this CPU, which build "
                         f"another base than the workflow's; set {KERNELS_VARIABLE}={took.lower()} to build one on "
                         f"purpose")
    warmstart(cfg, progress=not args.no_progress)
    return 0
