# A confirmation (config `confirmation`, e.g. config/confirm.yaml): the study's comparisons on fresh
# seeds, a batch of seed pairs per look, until every primary has decided or the cap is reached
# (docs/verdict.md, "The confirmation on the protocol"; pods.study.confirm). Look k analyses the
# seeds first_seed .. first_seed + k * batch - 1 of every arm; after it, the `look` checkpoint's
# table says whether the next batch is needed, and only then does the `confirm` target ask for it:
# a stopped machine loses nothing (finished runs are never retrained) and the rerun picks up the
# rest. Every look's files are stamped by content (common.smk, `derived`), so a fresh clone's
# `confirm` re-uses the committed looks instead of redoing them on checkout times.
CONFIRM = config.get("confirmation")
if CONFIRM:
    CONFIRM_DIR = f"{PATHS.results}/confirm"
    CONFIRM_PARAMS = {"batch": CONFIRM["batch"], "max_looks": CONFIRM["max_looks"],
                      "procedure": CONFIRM.get("procedure", "fixed_sequence")}

    def look_seeds(k) -> list[int]:
        return list(range(CONFIRM["first_seed"], CONFIRM["first_seed"] + CONFIRM["batch"] * int(k)))

    def look_run_dirs(k) -> list[str]:
        return sorted({PATHS.run_dir(Run(row["benchmark"], row["hardware"], method, seed))
                       for row in COMPARISONS for method in (row["baseline"], row["method"])
                       for seed in look_seeds(k)})

    def look_runs(k) -> list[str]:
        """What a look analyses from every run of its seeds (run_inputs: the train rule writes the
        missing ones; finished ones, the earlier looks' included, are read as they are)."""
        return sorted({f for path in look_run_dirs(k) for f in run_inputs(path)})

    def look_logs(k) -> list[str]:
        """The logs a look's analysis read, once its runs are trained: what its stamps record."""
        return [f"{path}/{name}" for path in look_run_dirs(k) for name in ("evals.jsonl", "steps.jsonl")]

    def look_study_text(k) -> str:
        rows = [{**row, "seeds": look_seeds(k)} for row in COMPARISONS]
        return yaml.safe_dump({"comparisons": rows}, sort_keys=False)

    def look_files(k):
        return {name: f"{CONFIRM_DIR}/{name}{k}.{ext}"
                for name, ext in (("study_look", "yaml"), ("summary_look", "csv"), ("look", "csv"))}

    for _k in range(1, CONFIRM["max_looks"] + 1):
        _paths = look_files(_k)
        # a look's study file is fresh when it says what the config says (as the study file is)
        derived(f"look_study{_k}", dict)
        FRESH[f"look_study{_k}"] = (Path(_paths["study_look"]).is_file()
                                    and Path(_paths["study_look"]).read_text() == look_study_text(_k))
        derived(f"look_summary{_k}", lambda k=_k: {"study": look_files(k)["study_look"], "runs": look_runs(k)},
                upstream=[f"look_study{_k}"])
        derived(f"look_check{_k}", lambda k=_k: {"study": look_files(k)["study_look"], "runs": look_runs(k)},
                upstream=[f"look_study{_k}"])
        derived(f"look{_k}", lambda k=_k: {"design": CONFIRM["design_summary"],
                                           "looks": [look_files(i)["summary_look"] for i in range(1, k + 1)]},
                CONFIRM_PARAMS, upstream=[f"look_summary{i}" for i in range(1, _k + 1)])

    rule look_study:
        input:
            unpack(lambda wc: by_content(f"look_study{wc.k}")),
        output:
            f"{CONFIRM_DIR}/study_look{{k}}.yaml",
        localrule: True
        run:
            atomic_write_text(output[0], look_study_text(wildcards.k))

    rule look_summary:
        input:
            unpack(lambda wc: by_content(f"look_summary{wc.k}")),
        output:
            f"{CONFIRM_DIR}/summary_look{{k}}.csv",
        params:
            runs=RUNS,
        localrule: True
        log:
            f"{LOGS}/confirm/analyze_look{{k}}.log",
        run:
            shell("pods analyze --runs {params.runs} --study {input.study} --out {output} > {log} 2>&1")
            write_stamp(f"look_summary{wildcards.k}", {"study": input.study, "runs": look_logs(wildcards.k)})

    # the population model the calibration rests on, against the confirmation's own held-out seeds
    # (pods calibrate --check-only; docs/verdict.md): run for the look the sequence stops at
    rule look_check:
        input:
            unpack(lambda wc: by_content(f"look_check{wc.k}")),
        output:
            f"{CONFIRM_DIR}/check_look{{k}}.md",
        params:
            runs=RUNS,
        localrule: True
        log:
            f"{LOGS}/confirm/check_look{{k}}.log",
        run:
            shell("pods calibrate --check-only --runs {params.runs} --study {input.study} --out {output} > {log} 2>&1")
            write_stamp(f"look_check{wildcards.k}", {"study": input.study, "runs": look_logs(wildcards.k)})

    checkpoint look:
        input:
            unpack(lambda wc: by_content(f"look{wc.k}")),
        output:
            f"{CONFIRM_DIR}/look{{k}}.csv",
        params:
            **CONFIRM_PARAMS,
        localrule: True
        run:
            shell("pods confirm --design {input.design} --looks {input.looks} --batch {params.batch} "
                  "--max-looks {params.max_looks} --procedure {params.procedure} --out {output}")
            write_stamp(f"look{wildcards.k}")

    def confirmation_done(wc):
        """The last look's table: each finished look decides whether the next batch is trained."""
        import pandas as pd

        k = 1
        while True:
            table = checkpoints.look.get(k=k).output[0]
            if bool(pd.read_csv(table)["finished"].iloc[0]) or k >= CONFIRM["max_looks"]:
                return table
            k += 1

    def confirmation_inputs(wc):
        table = confirmation_done(wc)
        k = Path(table).stem.removeprefix("look")
        return {"look": table, "check": f"{CONFIRM_DIR}/check_look{k}.md"}

    rule confirm:
        input:
            unpack(confirmation_inputs),
        localrule: True
        run:
            print(Path(input.look).with_suffix(".md").read_text(), end="")
            print(Path(input.check).read_text().split("\n\n", 1)[1], end="")
