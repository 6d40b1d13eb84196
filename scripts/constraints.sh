#!/usr/bin/env bash
# Writes constraints.txt: every package `pip install '.[dev,spark-local]'` resolves to today, pinned.
# Run it after changing the dependencies in pyproject.toml; CI and scripts/setup.sh install from it.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PYTHON=${PYTHON:-python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$PYTHON" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install -qq --disable-pip-version-check --upgrade pip
"$work/venv/bin/python" -m pip install -qq --disable-pip-version-check "$ROOT[dev,spark-local]"
{
    echo "# Versions CI and scripts/setup.sh install rabbitry[dev,spark-local] with (pip install -c constraints.txt)."
    echo "# A known-good set: regenerate with scripts/constraints.sh after changing dependencies."
    "$work/venv/bin/python" -m pip freeze --disable-pip-version-check | grep -v '^rabbitry[ =@]'
} >"$ROOT/constraints.txt"
echo "wrote $ROOT/constraints.txt ($(grep -vc '^#' "$ROOT/constraints.txt") packages)"
