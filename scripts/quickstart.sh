#!/usr/bin/env bash
# The README's quickstart, as a user runs it: `pip install` rabbitry into a fresh virtualenv (not
# the development one), start a dev broker, apply the example, plan again (nothing to do), stop.
# CI runs it (scripts/test.sh) so that a missing dependency or a packaging mistake fails there.
#
# Needs a container engine for the dev broker: Docker, or after scripts/setup.sh on a machine
# without one, Podman through its socket (source .rabbitry/env.sh first, as scripts/test.sh does).
# Settings (environment): PYTHON (default python3), QUICKSTART_BROKER (the dev broker's name,
# default rabbitry-quickstart, so that a developer's own `rabbitry-dev` is left alone).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PYTHON=${PYTHON:-python3}
NAME=${QUICKSTART_BROKER:-rabbitry-quickstart}
work=$(mktemp -d)
cleanup() {
    [[ -x $work/venv/bin/rabbitry ]] && (cd "$ROOT" && "$work/venv/bin/rabbitry" dev-broker down --name "$NAME" >/dev/null 2>&1) || true
    rm -rf "$work"
}
trap cleanup EXIT

say() { printf '+ %s\n' "$*"; }

say "pip install '.[containers]' into a fresh virtualenv"
"$PYTHON" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install -qq --disable-pip-version-check \
    -c "$ROOT/constraints.txt" "$ROOT[containers]"
export PATH=$work/venv/bin:$PATH
# the installed package, not the checkout: run from elsewhere, with the example copied
cp "$ROOT/examples/shop.yaml" "$work/shop.yaml"

cd "$ROOT"  # dev-broker records its URLs in ./.rabbitry when there is one
say "rabbitry --version"
(cd "$work" && rabbitry --version)
say "rabbitry validate shop.yaml"
(cd "$work" && rabbitry validate shop.yaml)
say "rabbitry dev-broker up --name $NAME"
rabbitry dev-broker up --name "$NAME"
eval "$(rabbitry dev-broker env --name "$NAME")"
say "rabbitry apply shop.yaml --auto-approve"
(cd "$work" && rabbitry apply shop.yaml --auto-approve)
say "rabbitry plan shop.yaml --detailed-exitcode (exit 0: nothing left to do)"
(cd "$work" && rabbitry plan shop.yaml --detailed-exitcode)
say "rabbitry dev-broker down --name $NAME"
rabbitry dev-broker down --name "$NAME"
echo "quickstart: ok"
