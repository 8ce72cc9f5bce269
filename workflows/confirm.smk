# A confirmation (config `confirmation`, e.g. config/decide.yaml): the study's comparisons on fresh
# seeds, a batch of seed pairs per look, until every primary has decided or the cap is reached
# (docs/verdict.md, "Seeds until it decides"; pods.study.confirm). Look k analyses the seeds
# first_seed .. first_seed + k * batch - 1 of every arm; after it, the `look` checkpoint's table says
# whether the next batch is needed, and only then does the `confirm` target ask for it: a stopped
# machine loses nothing (finished runs are never retrained) and the rerun picks up the rest.
CONFIRM = config.get("confirmation")
if CONFIRM:
    CONFIRM_DIR = f"{PATHS.results}/confirm"

    def look_seeds(k) -> list[int]:
        return list(range(CONFIRM["first_seed"], CONFIRM["first_seed"] + CONFIRM["batch"] * int(k)))

    def look_runs(wc):
        """What a look analyses from every run of its seeds (run_inputs: the train rule writes the
        missing ones; finished ones, the earlier looks' included, are read as they are)."""
        files = []
        for row in COMPARISONS:
            for method in (row["baseline"], row["method"]):
                for seed in look_seeds(wc.k):
                    files += run_inputs(PATHS.run_dir(Run(row["benchmark"], row["hardware"], method, seed)))
        return sorted(set(files))

    rule look_study:
        output:
            f"{CONFIRM_DIR}/study_look{{k}}.yaml",
        params:
            comparisons=COMPARISONS,
        localrule: True
        run:
            rows = [{**row, "seeds": look_seeds(wildcards.k)} for row in params.comparisons]
            atomic_write_text(output[0], yaml.safe_dump({"comparisons": rows}, sort_keys=False))

    rule look_summary:
        input:
            study=f"{CONFIRM_DIR}/study_look{{k}}.yaml",
            runs=look_runs,
        output:
            f"{CONFIRM_DIR}/summary_look{{k}}.csv",
        params:
            runs=RUNS,
        localrule: True
        log:
            f"{LOGS}/confirm/analyze_look{{k}}.log",
        shell:
            "pods analyze --runs {params.runs} --study {input.study} --out {output} > {log} 2>&1"

    checkpoint look:
        input:
            design=CONFIRM["design_summary"],
            looks=lambda wc: [f"{CONFIRM_DIR}/summary_look{i}.csv" for i in range(1, int(wc.k) + 1)],
        output:
            f"{CONFIRM_DIR}/look{{k}}.csv",
        params:
            batch=CONFIRM["batch"],
            max_looks=CONFIRM["max_looks"],
            procedure=CONFIRM.get("procedure", "fixed_sequence"),
        localrule: True
        shell:
            "pods confirm --design {input.design} --looks {input.looks} --batch {params.batch} "
            "--max-looks {params.max_looks} --procedure {params.procedure} --out {output}"

    def confirmation_done(wc):
        """The last look's table: each finished look decides whether the next batch is trained."""
        import pandas as pd

        k = 1
        while True:
            table = checkpoints.look.get(k=k).output[0]
            if bool(pd.read_csv(table)["finished"].iloc[0]) or k >= CONFIRM["max_looks"]:
                return table
            k += 1

    rule confirm:
        input:
            confirmation_done,
        localrule: True
        run:
            print(Path(input[0]).with_suffix(".md").read_text(), end="")
