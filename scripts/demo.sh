#!/usr/bin/env bash
# The main job, from nothing: set the machine up, start a local broker, apply the example specs
# (showing the plan first and that a second plan has nothing left to do), then run the delay and
# retry flow on the live broker.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

bash scripts/setup.sh
# shellcheck source=/dev/null
source .rabbitry/env.sh
export PATH=$ROOT/.venv/bin:$PATH

banner() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

banner "Local broker"
rabbitry dev-broker up
eval "$(rabbitry dev-broker env)"

for spec in examples/shop.yaml examples/delays.yaml; do
    banner "rabbitry validate $spec"
    rabbitry validate "$spec"
    banner "rabbitry plan $spec"
    rabbitry plan "$spec"
    banner "rabbitry apply $spec"
    rabbitry apply "$spec" --auto-approve
    banner "rabbitry plan $spec (again: nothing left to do)"
    rabbitry plan "$spec" --detailed-exitcode
done

banner "Delays and retries on the live broker (examples/delay_flow.py)"
python examples/delay_flow.py

banner "Done"
echo "The broker keeps running: management UI at $(rabbitry dev-broker url --management)"
echo "Stop it with: .venv/bin/rabbitry dev-broker down"
