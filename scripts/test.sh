#!/usr/bin/env bash
# The project's gate, as CI runs it (.ci/run): setup, then lint, format, types and tests.
# Arguments go to pytest (e.g. `scripts/test.sh tests/unit -x`).
#
# Every check runs even when an earlier one failed, so one run shows every problem; the exit
# status is 1 if any failed. Tests that skip make the run fail in CI and whenever the broker comes
# from a container: a skipped broker test is not a pass.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

bash scripts/setup.sh
# shellcheck source=/dev/null
source .rabbitry/env.sh

# Which broker the tests use. In CI always a container: a known RabbitMQ with the plugins the
# tests need, whatever broker the CI machine may offer. Locally, RABBITMQ_URL (for instance from
# `eval "$(rabbitry dev-broker env)"`) is used when set, and a container otherwise. The provider
# is always forced: setup.sh has just made a container engine available, so a broker that cannot
# be had is a failure to see, not a reason to skip the integration tests.
if [[ -z ${RABBITRY_TEST_BROKER:-} ]]; then
    if [[ -n ${CI:-} || -z ${RABBITMQ_URL:-} ]]; then
        export RABBITRY_TEST_BROKER=testcontainers
    else
        export RABBITRY_TEST_BROKER=env
    fi
fi

BIN=$ROOT/.venv/bin
JUNIT=$ROOT/.rabbitry/junit.xml
failed=()

step() {
    # $1: name; the rest: the command.
    local name=$1 started=$SECONDS
    shift
    printf '\n==> %s\n' "$name"
    if "$@"; then
        printf '==> %s: ok (%d s)\n' "$name" $((SECONDS - started))
    else
        printf '==> %s: FAILED (%d s)\n' "$name" $((SECONDS - started))
        failed+=("$name")
    fi
}

run_pytest() {
    local rc=0
    rm -f "$JUNIT"
    "$BIN/python" -m pytest --junitxml="$JUNIT" "$@" || rc=$?
    if [[ $rc -eq 5 ]]; then
        echo "pytest collected no tests: that is a failure, not a pass" >&2
        return 1
    fi
    return "$rc"
}

# Lists skipped tests from the JUnit report (xfail, which JUnit also calls skipped, is not one);
# fails when there are any and skips are not allowed.
check_skips() {
    [[ -f $JUNIT ]] || return 0
    local strict=0
    if [[ -n ${CI:-} || $RABBITRY_TEST_BROKER == testcontainers ]]; then
        strict=1
    fi
    "$BIN/python" - "$JUNIT" "$strict" <<'PY'
import sys
import xml.etree.ElementTree as ET

skipped = []
for case in ET.parse(sys.argv[1]).getroot().iter("testcase"):
    for skip in case.findall("skipped"):
        if skip.get("type") == "pytest.xfail":
            continue
        name = f"{case.get('classname')}::{case.get('name')}"
        skipped.append(f"  {name}: {skip.get('message', '')}")
if not skipped:
    sys.exit(0)
strict = sys.argv[2] == "1"
print(f"{len(skipped)} test(s) skipped{' (not allowed here)' if strict else ''}:")
print("\n".join(skipped))
sys.exit(1 if strict else 0)
PY
}

echo "test broker: RABBITRY_TEST_BROKER=$RABBITRY_TEST_BROKER, image ${RABBITRY_TEST_IMAGE:-default}"
step "ruff check" "$BIN/ruff" check .
step "ruff format" "$BIN/ruff" format --check .
step "mypy" "$BIN/mypy"
step "pytest" run_pytest "$@"
step "no skipped tests" check_skips
# The package as users get it: pip install into a fresh virtualenv, then the README quickstart.
if [[ $# -eq 0 ]]; then
    step "quickstart (pip install, dev broker, apply)" bash scripts/quickstart.sh
fi

# The whole suite runs on the current RabbitMQ (RABBITRY_TEST_IMAGE). The oldest release rabbitry
# supports and the newest behave differently where the provisioner, the patterns and the clients
# must adapt (policy apply-to values, quorum-queue arguments and delivery limits, x-death, the
# definitions import, the version table): those modules run again on each. Only on containers,
# and only for a full run.
COMPAT_TESTS=(
    tests/integration/test_broker_versions.py
    tests/integration/test_provision.py
    tests/integration/test_examples.py
    tests/integration/test_patterns.py
    tests/integration/test_migration.py
    tests/integration/test_publisher.py
    tests/integration/test_worker.py
    tests/integration/test_dlq.py
    tests/integration/test_connections.py
    tests/integration/test_plan_counts.py
    tests/integration/test_saved_plans.py
    tests/integration/test_kinds.py
    tests/integration/test_import_definitions.py
    tests/integration/test_spark_source.py
)
# RabbitMQ 4.3.6's definitions export leaves internal exchanges out, so a file it writes does not
# round-trip (README, definitions files): the definitions-file tests run on 3.10 and 4.0 only.
NEWEST_TESTS=()
for each in "${COMPAT_TESTS[@]}"; do
    [[ $each == tests/integration/test_import_definitions.py ]] || NEWEST_TESTS+=("$each")
done
if [[ $# -eq 0 && $RABBITRY_TEST_BROKER == testcontainers ]]; then
    if [[ -n ${RABBITRY_COMPAT_IMAGE:-} ]]; then
        echo "compatibility run: $RABBITRY_COMPAT_IMAGE"
        compat_pytest() { RABBITRY_TEST_IMAGE=$RABBITRY_COMPAT_IMAGE run_pytest -q "${COMPAT_TESTS[@]}"; }
        step "pytest on $RABBITRY_COMPAT_IMAGE" compat_pytest
        step "no skipped tests on $RABBITRY_COMPAT_IMAGE" check_skips
    fi
    if [[ -n ${RABBITRY_NEWEST_IMAGE:-} ]]; then
        echo "newest-release run: $RABBITRY_NEWEST_IMAGE"
        newest_pytest() { RABBITRY_TEST_IMAGE=$RABBITRY_NEWEST_IMAGE run_pytest -q "${NEWEST_TESTS[@]}"; }
        step "pytest on $RABBITRY_NEWEST_IMAGE" newest_pytest
        step "no skipped tests on $RABBITRY_NEWEST_IMAGE" check_skips
    fi
fi

if ((${#failed[@]})); then
    printf '\nFAILED: %s\n' "${failed[*]}"
    exit 1
fi
printf '\nall checks passed\n'
