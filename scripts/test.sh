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
REPORTS=$ROOT/.rabbitry/junit
# The integration tests wait on brokers and subprocesses more than they compute: more workers
# than cores. They share one broker (rabbitry.testing.shared), each test in its own vhost.
WORKERS=${RABBITRY_TEST_WORKERS:-4}
VERSION_WORKERS=${RABBITRY_VERSION_WORKERS:-2}
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

# $1: the JUnit report to write; the rest: pytest's arguments.
run_pytest() {
    local junit=$1 rc=0
    shift
    mkdir -p "$REPORTS"
    rm -f "$junit"
    "$BIN/python" -m pytest --junitxml="$junit" "$@" || rc=$?
    if [[ $rc -eq 5 ]]; then
        echo "pytest collected no tests: that is a failure, not a pass" >&2
        return 1
    fi
    return "$rc"
}

# Lists skipped tests from the JUnit reports given (xfail, which JUnit also calls skipped, is not
# one); fails when there are any and skips are not allowed.
check_skips() {
    local strict=0
    if [[ -n ${CI:-} || $RABBITRY_TEST_BROKER == testcontainers ]]; then
        strict=1
    fi
    "$BIN/python" - "$strict" "$@" <<'PY'
import os
import sys
import xml.etree.ElementTree as ET

skipped = []
for report in sys.argv[2:]:
    if not os.path.exists(report):
        continue
    for case in ET.parse(report).getroot().iter("testcase"):
        for skip in case.findall("skipped"):
            if skip.get("type") == "pytest.xfail":
                continue
            name = f"{case.get('classname')}::{case.get('name')}"
            skipped.append(f"  {name}: {skip.get('message', '')}")
if not skipped:
    sys.exit(0)
strict = sys.argv[1] == "1"
print(f"{len(skipped)} test(s) skipped{' (not allowed here)' if strict else ''}:")
print("\n".join(skipped))
sys.exit(1 if strict else 0)
PY
}

echo "test broker: RABBITRY_TEST_BROKER=$RABBITRY_TEST_BROKER, image ${RABBITRY_TEST_IMAGE:-default}"
step "ruff check" "$BIN/ruff" check .
step "ruff format" "$BIN/ruff" format --check .
step "mypy" "$BIN/mypy"

if [[ $# -gt 0 ]]; then
    step "pytest" run_pytest "$REPORTS/pytest.xml" "$@"
    step "no skipped tests" check_skips "$REPORTS/pytest.xml"
    if ((${#failed[@]})); then
        printf '\nFAILED: %s\n' "${failed[*]}"
        exit 1
    fi
    printf '\nall checks passed\n'
    exit 0
fi

# Runs steps side by side, each in the background with its output kept apart, and prints each
# one's output and verdict in order once all have ended. Arguments: pairs of a step's name and
# the function that runs it.
side_by_side() {
    local dir i=0 n
    local -a names=() pids=()
    dir=$(mktemp -d)
    while (($#)); do
        names+=("$1")
        (
            started=$SECONDS
            rc=0
            "$2" >"$dir/$i.log" 2>&1 || rc=$?
            echo "$rc $((SECONDS - started))" >"$dir/$i.rc"
        ) &
        pids+=($!)
        shift 2
        i=$((i + 1))
    done
    wait "${pids[@]}" || true
    for ((n = 0; n < i; n++)); do
        local rc=1 took=0
        [[ -f $dir/$n.rc ]] && read -r rc took <"$dir/$n.rc"
        printf '\n==> %s\n' "${names[n]}"
        cat "$dir/$n.log"
        if [[ $rc == 0 ]]; then
            printf '==> %s: ok (%d s)\n' "${names[n]}" "$took"
        else
            printf '==> %s: FAILED (%d s)\n' "${names[n]}" "$took"
            failed+=("${names[n]}")
        fi
    done
    rm -rf "$dir"
}

# The tests that depend on the RabbitMQ version (marked `versions`, see docs/testing.md) run
# again on the oldest release rabbitry supports and on the newest, each against its own broker,
# with 2 xdist workers each (RABBITRY_VERSION_WORKERS): run one test at a time, each set waited
# on its broker more than on the cores and was the longest step after the parallel run. They
# run after the current release's parallel suite, not beside it (under that load, three
# brokers, Spark and four workers on 2 cores, timing tests failed), and side by side with the
# whole-broker tests (a broker of their own too) and the quickstart.
# RabbitMQ 4.3.6's definitions export leaves internal exchanges out, so a file it writes does not
# round-trip (README, definitions files): test_import_definitions.py runs on 3.10 and 4.0 only
# (the corpus of definitions files, test_definitions_corpus.py, runs on 4.3 too).
versions_on() {
    # $1: image; $2: JUnit report; the rest: more pytest arguments.
    local image=$1 junit=$2
    shift 2
    RABBITRY_TEST_IMAGE=$image run_pytest "$junit" -q -n "$VERSION_WORKERS" -m versions \
        tests/integration "$@"
}
compat_set() { versions_on "$RABBITRY_COMPAT_IMAGE" "$REPORTS/compat.xml"; }
newest_set() {
    versions_on "$RABBITRY_NEWEST_IMAGE" "$REPORTS/newest.xml" \
        --ignore=tests/integration/test_import_definitions.py
}
# Each compares the whole broker's definitions before and after: nothing else may use its broker.
broker_wide_set() {
    run_pytest "$REPORTS/broker-wide.xml" -q -n 0 -m "broker_wide and not serial" tests/integration
}
# The package as users get it: pip install into a fresh virtualenv, then the README quickstart.
quickstart() { bash scripts/quickstart.sh; }

step "unit tests" run_pytest "$REPORTS/unit.xml" tests/unit
step "integration tests ($WORKERS workers)" \
    run_pytest "$REPORTS/integration.xml" -n "$WORKERS" -m "not broker_wide and not serial" tests/integration
later=("whole-broker integration tests (alone on their broker)" broker_wide_set
    "quickstart (pip install, dev broker, apply)" quickstart)
if [[ $RABBITRY_TEST_BROKER == testcontainers ]]; then
    [[ -n ${RABBITRY_COMPAT_IMAGE:-} ]] &&
        later+=("versions-marked tests on $RABBITRY_COMPAT_IMAGE" compat_set)
    [[ -n ${RABBITRY_NEWEST_IMAGE:-} ]] &&
        later+=("versions-marked tests on $RABBITRY_NEWEST_IMAGE" newest_set)
fi
side_by_side "${later[@]}"
# Kill and restart workers against the clock: last, with nothing else running.
step "clock-sensitive integration tests (alone)" \
    run_pytest "$REPORTS/serial.xml" -n 0 -m serial tests/integration
step "no skipped tests" check_skips "$REPORTS"/*.xml

if ((${#failed[@]})); then
    printf '\nFAILED: %s\n' "${failed[*]}"
    exit 1
fi
printf '\nall checks passed\n'
