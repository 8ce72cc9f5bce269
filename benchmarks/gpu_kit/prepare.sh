#!/usr/bin/env bash
# Runs here (network): the wheels the GPU run needs and the GPU image lacks, for that image's
# Python (CPython 3.12, manylinux x86_64), into benchmarks/gpu_kit/wheels/ (git-ignored), which
# travels with the working tree to the GPU machine. Binary wheels are downloaded for that target;
# a package published only as an sdist is built here into a pure-Python wheel, or carried as its
# sdist when it compiles (run.sh builds it there); DeepSpeed is built here as a pure-Python wheel
# with its CUDA ops left to JIT (DS_BUILD_OPS=0).
# Prints the list and the total, and fails above the budget (the working tree may carry 64 MiB
# in all: the wheels get KIT_BUDGET_MIB of it, default 40).
#
#   bash benchmarks/gpu_kit/prepare.sh
set -euo pipefail
kit=$(cd "$(dirname "$0")" && pwd)
dest=$kit/wheels
budget_mib=${KIT_BUDGET_MIB:-40}
deepspeed_version=${DEEPSPEED_VERSION:-0.19.8}
rm -rf "$dest" && mkdir -p "$dest"
work=$(mktemp -d -t pods-gpu-kit-XXXXXX)
trap 'rm -rf "$work"' EXIT
target=(--python-version 3.12 --implementation cp --abi cp312 --platform manylinux2014_x86_64
        --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 --only-binary=:all:)

# the pinned list may name nothing the image already has (its package list is in the kit, dated)
image=$(grep -v '^#' "$kit/image-packages.txt" | tr 'A-Z_' 'a-z-')
while read -r req; do
    name=$(echo "${req%%==*}" | tr 'A-Z_' 'a-z-')
    if grep -qx "$name" <<<"$image"; then
        echo "prepare.sh: $name is in the GPU image already (image-packages.txt): drop it from wheels.txt" >&2
        exit 1
    fi
    if ! python -m pip download --quiet --no-deps "${target[@]}" -d "$dest" "$req" 2>"$work/err"; then
        python -m pip wheel --quiet --no-deps --no-binary=:all: -w "$work/built" "$req" 2>>"$work/err" \
            || { cat "$work/err" >&2; exit 1; }
    fi
done < <(grep -v '^#' "$kit/wheels.txt" | grep -v '^\s*$')
DS_BUILD_OPS=0 python -m pip wheel --quiet --no-deps --no-build-isolation -w "$work/built" \
    "deepspeed==$deepspeed_version" 2>"$work/err" || { cat "$work/err" >&2; exit 1; }
for wheel in "$work"/built/*.whl; do
    case "$(basename "$wheel")" in
        *-py3-none-any.whl|*-py2.py3-none-any.whl) mv "$wheel" "$dest/" ;;
        *)  # a compiled package without a wheel for the image: its sdist, built there (gcc is in the image)
            name=$(basename "$wheel" | cut -d- -f1)
            python -m pip download --quiet --no-deps --no-binary=:all: -d "$dest" \
                "$(grep -v '^#' "$kit/wheels.txt" | grep -i "^${name//_/[-_]}==")" ;;
    esac
done

total=$(du -cb "$dest"/* | tail -1 | cut -f1)
ls -1 "$dest" | sed 's/^/  /'
echo "prepare.sh: $(ls "$dest" | wc -l) wheels, $(python -c "print(f'{$total / 2**20:.1f}')") MiB" \
    "(budget $budget_mib MiB) in $dest"
if [ "$total" -gt $((budget_mib * 1048576)) ]; then
    echo "prepare.sh: over the budget" >&2
    exit 1
fi
