"""The bottom line of a study target (pods.study.headline) and the content stamps that decide
whether a derived table is stale (pods.study.stamps)."""
from __future__ import annotations

import csv
import os
from pathlib import Path

from pods.study import stamps
from pods.study.headline import bottom_line, read_rows

REPO = Path(__file__).resolve().parents[2]


def test_the_bottom_line_of_the_committed_study_reads_its_summary():
    lines = bottom_line(read_rows(REPO / "results/summary.csv"), tables=["results/summary.md"], runs_total=36,
                        runs_reused=36, analysis="re-used")
    text = "\n".join(lines)
    assert lines[0] == "Bottom line"
    assert "36 in the study, 36 re-used as finished before this command, 0 trained now; tables re-used" in text
    assert "decided: 5 of 8 primary endpoints after the adjustment ((a) 2 of 4, (b) 3 of 4)" in text
    # the cost clock's speedups are wall-clock speedups: they count against the paper's claim, each judged
    # by its interval and named (every interval of the study holds 1.7)
    assert ("the paper's >= 1.7x for PODS over GRPO, judged by each interval (reach it: all of it >= 1.7; fall "
            "short: all of it below): cannot tell: arith equal_update, arith_hard equal_update, arith "
            "equal_generation, arith_hard equal_generation") in text
    assert "arith equal_update pods-max_variance-n64-m16 vs grpo-n16-m16: 1.42 [1.05, 1.91] undecided" in text
    assert "arith_hard equal_generation pods-max_variance-n64-m16 vs grpo-n64-m64: 2.30 [1.64, 3.24] faster" in text
    # the rule for levels at t = 0 gives the row that had no interval one
    assert "arith_hard equal_update pods-max_variance-n64-m16 vs grpo-n16-m16: 1.59 [1.00, 2.53] undecided" in text
    assert ("arith_hard equal_generation pods-max_variance-n64-m16 vs grpo-n64-m64: +0.014 [+0.007, +0.021] higher"
            in text)
    assert lines[-1] == "  tables: results/summary.md"


def test_the_bottom_line_reads_columns_by_name_and_ignores_new_ones():
    rows = [
        {"question": "a", "role": "primary", "estimate": "2.0", "ci_low": "1.8", "ci_high": "2.4", "benchmark": "x",
         "verdict": "faster", "a_new_column": "?"},
        {"question": "a", "role": "primary", "estimate": "1.2", "benchmark": "y", "verdict": "undecided"},
        {"question": "a", "role": "secondary", "estimate": "9.0", "benchmark": "x", "verdict": "faster"},
        {"question": "b", "role": "primary", "estimate": "0.05", "benchmark": "x", "verdict_adjusted": "higher",
         "verdict": "higher"},
    ]
    text = "\n".join(bottom_line(rows))
    assert "decided: 2 of 3 primary endpoints after the adjustment ((a) 1 of 2, (b) 1 of 1)" in text
    assert "reach it: x; cannot tell: y" in text  # x's interval lies above 1.7; y has none
    assert "x: 2.00 [1.80, 2.40] faster" in text and "y: 1.20 undecided" in text and "x: +0.050 higher" in text
    assert "9.00" not in text  # secondary endpoints are the tables' business



def test_the_paper_claim_is_judged_for_its_rule_and_names_each_pods_setting():
    """The 1.7x line judges PODS's own rule (max_variance) against GRPO: another rule is an ablation,
    not the claim; several settings of it (the ablations' n and m) are each named by their method."""
    def row(method, low, high):
        return {"question": "a", "role": "primary", "estimate": str((low + high) / 2), "ci_low": str(low),
                "ci_high": str(high), "name": "n_scaling", "benchmark": "arith", "baseline": "grpo-n16-m16",
                "method": method, "verdict": "undecided"}

    rows = [row("pods-max_variance-n32-m16", 1.8, 2.5), row("pods-max_variance-n64-m16", 0.5, 1.5),
            row("pods-random-n64-m16", 0.1, 0.2)]
    claim = [line for line in bottom_line(rows) if "1.7x" in line]
    assert claim[0].endswith("reach it: arith pods-max_variance-n32-m16; fall short of it: arith "
                             "pods-max_variance-n64-m16")


def test_the_bottom_line_follows_a_summary_written_with_other_columns(tmp_path):
    path = tmp_path / "summary.csv"
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, ["role", "estimate", "question", "verdict_adjusted", "benchmark"])
        writer.writeheader()
        writer.writerow({"role": "primary", "estimate": "0.9", "question": "a", "verdict_adjusted": "slower",
                         "benchmark": "z"})
    text = "\n".join(bottom_line(read_rows(path)))
    assert "decided: 1 of 1 primary endpoints after the adjustment ((a) 1 of 1)" in text and "z: 0.90 slower" in text


def test_a_stamp_matches_by_content_not_by_time_and_travels_with_its_folder(tmp_path):
    inputs = tmp_path / "results/runs/a.jsonl"
    inputs.parent.mkdir(parents=True)
    inputs.write_text("one\n")
    stamp = tmp_path / "results/stamps/analyze.json"
    assert not stamps.unchanged(stamp, [inputs])  # none recorded yet
    stamps.write(stamp, [inputs], {"boot": 100})
    os.utime(inputs, (1, 1))
    assert stamps.unchanged(stamp, [inputs], {"boot": 100})
    assert not stamps.unchanged(stamp, [inputs], {"boot": 200})  # a parameter changed
    assert not stamps.unchanged(stamp, [inputs, tmp_path / "results/runs/b.jsonl"], {"boot": 100})  # absent input
    moved = tmp_path / "copy"
    (tmp_path / "results").rename(moved)
    assert stamps.unchanged(moved / "stamps/analyze.json", [moved / "runs/a.jsonl"], {"boot": 100})
    (moved / "runs/a.jsonl").write_text("two\n")
    assert not stamps.unchanged(moved / "stamps/analyze.json", [moved / "runs/a.jsonl"], {"boot": 100})


def test_command_line_config_values_are_typed_as_yaml_reads_them():
    from pods.study.schema import typed_command_line

    given = {"seeds": ["0", "1"], "paper_summary": "null", "train": {"max_steps": "10", "report_to": ["tensorboard"]},
             "hub_revisions": {"Qwen/x": "abc123"}, "figures_dir": "figures/local"}
    assert typed_command_line(given) == {"seeds": [0, 1], "paper_summary": None,
                                         "train": {"max_steps": 10, "report_to": ["tensorboard"]},
                                         "hub_revisions": {"Qwen/x": "abc123"}, "figures_dir": "figures/local"}


def test_the_bottom_line_names_the_primary_endpoint_the_summary_holds():
    rows = [{"question": "a", "role": "primary", "endpoint": "gain_profile", "estimate": "1.4", "verdict": "undecided"},
            {"question": "b", "role": "primary", "endpoint": "new_rule", "estimate": "0.1", "verdict": "higher"}]
    text = "\n".join(bottom_line(rows))
    assert "(a) wall-clock speedup over 10-90% of the baseline's gain (gain profile):" in text
    assert "(b) accuracy within the budget, method - baseline (new_rule):" in text


def test_the_confirmations_standing_is_read_off_its_last_look(tmp_path):
    from pods.study.headline import confirmation_lines

    columns = ["look", "pairs", "question", "endpoint", "position", "benchmark", "design", "baseline", "method",
               "z", "boundary", "decided_at_look", "verdict", "finished"]
    rows = [[1, 4, "b", "mean_accuracy", 1, "arith_hard", "equal_update", "grpo-n16-m16",
             "pods-max_variance-n64-m16", 2.1, 4.73, "", "undecided", False],
            [2, 8, "b", "mean_accuracy", 1, "arith_hard", "equal_update", "grpo-n16-m16",
             "pods-max_variance-n64-m16", 3.4, 2.95, 2, "higher", False],
            [2, 8, "a", "gain_profile", 1, "arith", "equal_generation", "grpo-n64-m64",
             "pods-max_variance-n64-m16", 1.0, 2.95, "", "undecided", False]]
    path = tmp_path / "look2.csv"
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(columns)
        writer.writerows(rows)
    lines = confirmation_lines(path, config="config/decide.yaml")
    assert lines[0].startswith("Confirmation on fresh seeds (config/decide.yaml): look 2, 8 seed pairs per arm, "
                               "continues with the next batch")
    assert lines[1].startswith("  decided: 1 of 2 comparisons at the group-sequential boundary")
    assert lines[2].startswith("  (a) Does PODS reach the baseline's accuracy sooner in wall clock?")
    assert lines[3].startswith("      arith equal_generation") and lines[3].endswith("undecided")
    assert lines[4].startswith("  (b) Does PODS learn more within the same time budget?")
    assert lines[5].endswith("z 3.40 (boundary 2.95) higher") and lines[-1] == f"  table: {tmp_path / 'look2.md'}"


def test_a_comparison_past_its_boundary_that_waits_in_the_sequence_says_why(tmp_path):
    from pods.study.headline import confirmation_lines

    columns = ["look", "pairs", "question", "endpoint", "position", "benchmark", "design", "baseline", "method",
               "estimate", "rci_low", "rci_high", "z", "boundary", "decided_at_look", "verdict", "finished"]
    rows = [[4, 16, "a", "gain_profile", 1, "arith", "equal_update", "grpo-n16-m16", "pods-max_variance-n64-m16",
             1.06, 0.80, 1.40, 0.43, 2.04, "", "undecided", True],
            [4, 16, "a", "gain_profile", 2, "arith", "equal_generation", "grpo-n64-m64",
             "pods-max_variance-n64-m16", 1.40, 1.15, 1.70, 3.15, 2.04, "", "undecided", True]]
    path = tmp_path / "look4.csv"
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(columns)
        writer.writerows(rows)
    lines = confirmation_lines(path)
    assert any(line.endswith("1.06 [0.80, 1.40], z 0.43 (boundary 2.04) undecided") for line in lines)
    assert any(line.endswith("1.40 [1.15, 1.70], z 3.15 (boundary 2.04) undecided (past its boundary, but the fixed "
                             "sequence tests it only after arith equal_update decides)") for line in lines)
    # the paper's 1.7x, by the repeated intervals: [0.80, 1.40] lies below it, [1.15, 1.70] holds it
    assert lines[5] == ("      the paper's >= 1.7x for PODS over GRPO, judged by each repeated interval (reach it: "
                        "all of it >= 1.7; fall short: all of it below): fall short of it: arith equal_update; "
                        "cannot tell: arith equal_generation")


def test_a_study_prints_only_the_confirmation_of_its_own_comparisons(tmp_path):
    """Every study layered over the default inherits its confirmation folder; the bottom line adds
    that confirmation only where its looks tested the same comparisons (the committed one: the
    default study's, not the smoke study's)."""
    import yaml

    from pods.study.headline import confirmation_of
    from pods.study.plan import Study
    from pods.study.schema import load_study_config

    def rows(*layers):
        return Study(load_study_config("config/config.yaml", *layers)).study_rows()

    folder = REPO / "results/decide/confirm"   # the earlier confirmation of the same comparisons
    last = max(int(path.stem.removeprefix("look")) for path in folder.glob("look*.csv"))  # the committed looks
    assert confirmation_of(folder, rows()) == folder / f"look{last}.csv"
    assert confirmation_of(folder, rows("config/smoke.yaml")) is None
    assert confirmation_of(folder, rows("config/ablations.yaml")) is None
    assert confirmation_of(tmp_path, rows()) is None and confirmation_of(None, rows()) is None
    # a later look is the one read
    for k in (1, 2, 10):
        (tmp_path / f"look{k}.csv").write_text((folder / "look1.csv").read_text())
    assert confirmation_of(tmp_path, rows()) == tmp_path / "look10.csv"
    # the default study's bottom line names the confirmation on the protocol
    default = yaml.safe_load((REPO / "config/config.yaml").read_text())
    assert default["confirmation_results"] == "results/confirm/confirm"


def test_the_confirmations_lines_name_a_primary_without_a_p_value(tmp_path):
    """A look row whose z is empty (no p-value, confirm.look_z) reads n/a, never nan."""
    from pods.study.headline import confirmation_lines

    table = (REPO / "results/decide/confirm/look1.csv").read_text().splitlines()
    header = table[0].split(",")
    row = table[1].split(",")
    row[header.index("z")] = ""
    (tmp_path / "look1.csv").write_text("\n".join([table[0], ",".join(row), *table[2:]]) + "\n")
    lines = confirmation_lines(tmp_path / "look1.csv")
    assert any("z n/a (no p-value)" in line for line in lines)
    assert not any(" nan " in line for line in lines)
