"""`pods paper download | manifest | import | figures`: the authors'-data side's command line."""
from __future__ import annotations

import yaml

from pods.atomic import atomic_write_text
from pods.paper.figures import PAPER_FIGURES, build_paper_outputs
from pods.paper.importer import import_release
from pods.paper.release import MANIFEST, RELEASE_COMMIT, download_release, load_manifest, make_manifest
from pods.study.tables import to_markdown


# --------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------
def _cmd_download(args) -> int:
    download_release(args.dest, load_manifest(args.manifest), url=args.url)
    print(f"release {RELEASE_COMMIT[:7]} results/ in {args.dest}")
    return 0


def _cmd_manifest(args) -> int:
    manifest = make_manifest(args.src)
    absent = [name for name, sha in manifest["files"].items() if sha is None]
    header = (f"# The authors' released results/ at the pinned commit: sha256 of every file the paper's\n"
              f"# figures use, made by `pods paper manifest --src {args.src}`.\n"
              "# A downloaded file whose sha256 differs is refused.\n")
    if absent:
        header += (f"# null: absent from that local copy ({len(absent)} files); such files are downloaded without\n"
                   f"# a pinned checksum and their sha256 is recorded in <dest>/SHA256SUMS.\n")
    atomic_write_text(args.out, header + yaml.safe_dump({"release": manifest}, sort_keys=False))
    print(f"{len(manifest['files']) - len(absent)} pinned, {len(absent)} unpinned -> {args.out}")
    return 0


def _cmd_import(args) -> int:
    report = import_release(args.src, args.out)
    print(f"imported {len(report['imported'])} settings into {args.out}/runs")
    for name, files in report["missing"].items():
        print(f"missing: {name} ({len(files)} files)")
    for note in report["notes"]:
        print(f"note: {note}")
    return 0


def _cmd_figures(args) -> int:
    result = build_paper_outputs(args.runs, args.out, names=args.figures, tables_dir=args.tables)
    print(f"figures: {', '.join(result['figures'])}")
    if result["missing"]:
        print(f"missing (runs not imported): {', '.join(result['missing'])}")
    print(to_markdown(result["speedups"]), end="")
    return 0


def add_arguments(p) -> None:
    sub = p.add_subparsers(dest="paper_command", metavar="STEP", required=True)
    d = sub.add_parser("download", help="fetch the release's results/ at the pinned commit, checksummed")
    d.add_argument("--dest", required=True)
    d.add_argument("--manifest", default=str(MANIFEST), help="YAML with repo, commit, url, files: {name: sha256}")
    d.add_argument("--url", default=None, help="URL template with {repo}, {commit}, {file} (default: GitHub raw)")
    d.set_defaults(func=_cmd_download)
    mf = sub.add_parser("manifest", help="write the checksum manifest from a local copy of the release")
    mf.add_argument("--src", required=True)
    mf.add_argument("--out", default=str(MANIFEST))
    mf.set_defaults(func=_cmd_manifest)
    i = sub.add_parser("import", help="release results/ -> <out>/runs/... in the run schema")
    i.add_argument("--src", required=True, help="folder with the release's results/ files")
    i.add_argument("--out", required=True)
    i.set_defaults(func=_cmd_import)
    f = sub.add_parser("figures", help="figures + speedups.csv + ablations.csv from imported runs")
    f.add_argument("--runs", required=True, help="the --out of `pods paper import`")
    f.add_argument("--out", default="figures/paper")
    f.add_argument("--tables", default=None, help="folder of the CSV/markdown tables (default: --out)")
    f.add_argument("--figures", nargs="+", default=None, choices=sorted(PAPER_FIGURES),
                   help="figures to draw (default: every one whose runs were imported)")
    f.set_defaults(func=_cmd_figures)
