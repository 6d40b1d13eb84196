#!/usr/bin/env bash
# The main job, from nothing: set the machine up, start a local broker, apply the example specs
# (showing the plan first and that a second plan has nothing left to do), then run the delay and
# retry flow on the live broker with rabbitry's worker, and bring the parked order back with
# `rabbitry dlq replay`.
#
# Settings (environment): DEMO_BROKER (the dev broker's container name, default rabbitry-dev;
# give another to leave a broker of that name alone, e.g. DEMO_BROKER=rabbitry-demo2).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
NAME=${DEMO_BROKER:-rabbitry-dev}

bash scripts/setup.sh
# shellcheck source=/dev/null
source .rabbitry/env.sh
export PATH=$ROOT/.venv/bin:$PATH

banner() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

banner "Local broker"
rabbitry dev-broker up --name "$NAME"
eval "$(rabbitry dev-broker env --name "$NAME")"

for spec in examples/shop.yaml examples/delays.yaml; do
    banner "rabbitry validate $spec"
    rabbitry validate "$spec"
    banner "rabbitry plan $spec"
    rabbitry plan "$spec"
    banner "rabbitry apply $spec"
    # --allow-replace: a dev broker set up by an older rabbitry is migrated, messages kept.
    rabbitry apply "$spec" --auto-approve --allow-replace
    banner "rabbitry plan $spec (again: nothing left to do)"
    rabbitry plan "$spec" --detailed-exitcode
done

# A parking lot left over from an earlier run would make the flow below ambiguous.
rabbitry dlq purge orders.work.parking --vhost delays --yes >/dev/null

banner "Delays and retries on the live broker (examples/delay_flow.py, handlers in examples/order_worker.py)"
python examples/delay_flow.py

banner "rabbitry dlq list / show: the parked order and why it is there"
rabbitry dlq list --vhost delays
rabbitry dlq show orders.work.parking --vhost delays

banner "rabbitry dlq replay: back to orders.work, confirmed, then removed from the parking lot"
rabbitry dlq replay orders.work.parking --vhost delays --all

banner "The payment service is up again: the replayed order goes through"
PAYMENTS=up python examples/delay_flow.py replayed

banner "Done"
echo "The broker keeps running: management UI at $(rabbitry dev-broker url --management --name "$NAME")"
echo "Run the handlers yourself: rabbitry worker run examples/order_worker.py:app"
echo "Stop it with: .venv/bin/rabbitry dev-broker down --name $NAME"
