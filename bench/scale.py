"""The provisioner at production size: validate, plan, apply and export of 5,000 and 50,000 objects.

Usage:  python bench/scale.py [--sizes 5000,50000] [--write-docs]
Brokers: each side starts a fresh RabbitMQ container of its own (rabbitry.testing, the same
image as the tests: run scripts/setup.sh first on a machine without Docker).

Every rabbitry figure is a whole CLI process (start-up included), as a user runs it. The peer is
the broker's own definitions import of the same primitives (``POST /api/definitions/{vhost}``),
in the same run, into a broker of its own: each side fills an empty vhost, made beforehand, of a
fresh broker (a broker slows down as it fills, and deleting 50,000 objects to make room takes
longer than creating them). For export the peer is ``GET /api/definitions/{vhost}`` plus
writing it as YAML. ``plan`` is the median of three runs on a broker left ``SETTLE`` seconds
after the apply (and, for information, of three right after it); its peak memory is the
largest maximum resident set of the six, in KB (1,000 bytes) per object. Beside each plan: the
broker's listing of the vhost, and a process that only makes the plan's reads
(bench/reads_only.py), the floor under a plan while the broker shares the client's cores.
"""

from __future__ import annotations

import argparse
import math
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import yaml
from results import one_vhost_spec, reference_seconds, write_section

from rabbitry.errors import BrokerError
from rabbitry.management.client import ManagementClient, q
from rabbitry.provisioner.applier import definitions_for
from rabbitry.testing import Broker
from rabbitry.testing.containers import BrokerContainer, start_broker
from rabbitry.topology import load_topology

HERE = Path(__file__).resolve().parent
RABBITRY = [str(Path(sys.executable).parent / "rabbitry")]
HEADING = "## Provisioning at scale (bench/scale.py)"
RETRY_QUEUES = 1000
SETTLE = 60
"""Seconds a broker is left after the apply before the settled plans: creating 20,000 quorum
queues keeps it busy (logs, snapshots) for a while after the import has answered."""


def spec_text(stack: str, vhost: str, objects: int) -> str:
    """About ``objects`` primitives: topic exchanges, classic and quorum queues, bindings, some
    policies, 1,000 queues with ``retry:`` (tier queues and parking lots) and a delay."""
    k = max(10, (objects - 5 * RETRY_QUEUES) // 5)
    exchanges = [{"name": f"ex.{i}", "type": "topic"} for i in range(k)]
    queues: list[dict[str, object]] = []
    bindings = []
    for i in range(k):
        queues.append({"name": f"q.{i}", "type": "quorum" if i % 2 else "classic"})
        queues.append({"name": f"audit.{i}", "arguments": {"x-message-ttl": 60000}})
        bindings.append({"source": f"ex.{i}", "destination": f"q.{i}", "routing_key": "a.#"})
        bindings.append({"source": f"ex.{i}", "destination": f"audit.{i}", "routing_key": "#"})
    for i in range(RETRY_QUEUES):
        # each expands to the work queue, two retry tiers and a parking lot
        queues.append(
            {
                "name": f"work.{i}",
                "type": "quorum",
                "retry": {"attempts": 3, "backoff": ["1s", "5s"]},
            }
        )
        bindings.append({"source": f"ex.{i % k}", "destination": f"work.{i}", "routing_key": "w"})
    policies = [
        {"name": f"cap.{i}", "pattern": f"^audit\\.{i}$", "definition": {"max-length": 100000}}
        for i in range(max(1, k // 100))
    ]
    later = {"name": "later", "max": "1h", "targets": [{"queue": "q.1"}]}
    return one_vhost_spec(
        stack,
        vhost,
        exchanges=exchanges,
        queues=queues,
        bindings=bindings,
        policies=policies,
        delays=[later],
    )


def run(*argv: str, env: dict[str, str] | None = None) -> tuple[float, int, str]:
    """Run the CLI as a process: (seconds, peak RSS in KiB, output); raises on a failure."""
    started = time.perf_counter()
    proc = subprocess.Popen(
        [*RABBITRY, *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **(env or {})},
    )
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode not in (0, 2):
        raise RuntimeError(f"rabbitry {' '.join(argv)} exited {proc.returncode}:\n{out[-3000:]}")
    return seconds, usage.ru_maxrss, out


def listing_once(management_url: str, vhost: str) -> float:
    """Seconds the broker takes to list a vhost's exchanges, queues and bindings, asked at
    once as a plan asks them (no statistics), bodies received and not parsed: the part of a
    plan no client can make faster, and which a broker on the same cores makes slower."""
    v = quote(vhost, safe="")
    lean = {"disable_stats": "true"}
    reads = [(f"/api/exchanges/{v}", lean), (f"/api/queues/{v}", lean), (f"/api/bindings/{v}", {})]
    with httpx.Client(timeout=600) as client:
        started = time.perf_counter()
        with ThreadPoolExecutor(len(reads)) as pool:
            answers = [
                pool.submit(client.get, management_url + path, params=params)
                for path, params in reads
            ]
            for answer in answers:
                answer.result().raise_for_status()
        return time.perf_counter() - started


def reads_once(env: dict[str, str], vhost: str) -> float:
    """Seconds of a process that makes a plan's reads and nothing else (bench/reads_only.py):
    start-up, the reads, the answers decoded. The floor under a plan on these cores."""
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, str(HERE / "reads_only.py"), vhost],
        env={**os.environ, **env},
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return time.perf_counter() - started


def median_run(times: int, *argv: str) -> float:
    return statistics.median(run(*argv)[0] for _ in range(times))


def fresh_broker() -> BrokerContainer:
    password = secrets.token_urlsafe(12)
    return start_broker(username="rabbitry", password=password, startup_timeout=300)


def cli_env(broker: Broker) -> dict[str, str]:
    userinfo = f"{quote(broker.username, safe='')}:{quote(broker.password, safe='')}"
    management = broker.management_url.replace("://", f"://{userinfo}@", 1)
    return {"RABBITRY_MANAGEMENT_URL": management, "RABBITRY_URL": broker.amqp_url()}


def apply_once(spec: Path, vhost: str) -> float:
    """``rabbitry apply`` of ``spec`` into an empty vhost of a fresh broker."""
    with fresh_broker() as mine:
        env = cli_env(mine.broker)
        with ManagementClient(env["RABBITRY_MANAGEMENT_URL"], timeout=3600) as client:
            client.put(f"/vhosts/{q(vhost)}", {})
        return run("apply", str(spec), "--auto-approve", env=env)[0]


PEER_FAILURES: list[str] = []
"""The broker's own imports that did not finish, as the table's notes say them."""


def import_once(definitions: dict[str, Any], vhost: str, attempts: int = 2) -> float:
    """The broker's own import of ``definitions`` into an empty vhost of a fresh broker.

    A single POST of 50,000 objects is at times cut off by the broker's HTTP server (the
    connection closes with no answer): that attempt is noted and the import runs again on
    another fresh broker; NaN when every attempt was cut off."""
    objects = sum(len(v) for v in definitions.values() if isinstance(v, list))
    for _ in range(attempts):
        with fresh_broker() as theirs:
            env = cli_env(theirs.broker)
            with ManagementClient(env["RABBITRY_MANAGEMENT_URL"], timeout=3600) as client:
                client.put(f"/vhosts/{q(vhost)}", {})
                started = time.perf_counter()
                try:
                    client.import_definitions(definitions, vhost, timeout=3600)
                except BrokerError as exc:
                    elapsed = time.perf_counter() - started
                    failure = f"{objects:,} objects, after {elapsed:.0f} s: {exc}"
                    print(f"the broker's import failed: {failure}", flush=True)
                    PEER_FAILURES.append(failure)
                    continue
                return time.perf_counter() - started
    return math.nan


def more_rounds(figures: dict[str, float], spec: Path, vhost: str, rounds: int) -> None:
    """``rounds`` more apply/import pairs, each side on a fresh broker, the order alternating:
    the figures become the medians (a single import of quorum queues varies by 10 %)."""
    topology = load_topology(spec)
    definitions = definitions_for(topology.vhosts[0].members())
    applies, imports = [figures["apply"]], [figures["import"]]
    for number in range(rounds):
        if number % 2 == 0:
            imports.append(import_once(definitions, vhost))
            applies.append(apply_once(spec, vhost))
        else:
            applies.append(apply_once(spec, vhost))
            imports.append(import_once(definitions, vhost))
        print(
            f"round {number + 2}: apply {applies[-1]:.2f} s, import {imports[-1]:.2f} s", flush=True
        )
    imports = [seconds for seconds in imports if not math.isnan(seconds)] or [math.nan]
    figures["apply"], figures["import"] = statistics.median(applies), statistics.median(imports)
    figures["rounds"] = len(applies)


def one_size(objects: int, tmp: Path, versions: set[str]) -> dict[str, float]:
    tag = uuid.uuid4().hex[:6]
    ours = f"scale-{objects}-{tag}"
    spec = tmp / f"{ours}.yaml"
    spec.write_text(spec_text(ours, ours, objects))
    topology = load_topology(spec)
    count = len(topology.resources()) - 1  # the vhost itself is not counted
    figures: dict[str, float] = {"objects": count}
    figures["validate"] = run("validate", str(spec))[0]
    try:
        with fresh_broker() as mine:
            env = cli_env(mine.broker)
            client = ManagementClient(env["RABBITRY_MANAGEMENT_URL"], timeout=3600)
            versions.add(str(client.overview().get("rabbitmq_version")))
            client.put(f"/vhosts/{q(ours)}", {})  # both sides fill an empty vhost
            figures["apply"] = run("apply", str(spec), "--auto-approve", env=env)[0]

            listings: list[float] = []
            reads: list[float] = []

            def plans() -> list[tuple[float, int, str]]:
                runs = []
                for _ in range(3):  # beside each plan: the broker's listing, the reads alone
                    runs.append(run("plan", str(spec), "--detailed-exitcode", env=env))
                    listings.append(listing_once(env["RABBITRY_MANAGEMENT_URL"], ours))
                    reads.append(reads_once(env, ours))
                for _, _, out in runs:
                    assert "No changes" in out, out[-2000:]
                return runs

            busy = plans()  # right after the apply: the broker is still settling its queues
            figures["plan_busy"] = statistics.median(seconds for seconds, _, _ in busy)
            time.sleep(SETTLE)
            settled = plans()
            figures["plan"] = statistics.median(seconds for seconds, _, _ in settled)
            figures["plan_rss_kib"] = max(rss for _, rss, _ in busy + settled)
            figures["listing"] = statistics.median(listings[3:])  # beside the settled plans
            figures["reads"] = statistics.median(reads[3:])

            exported = tmp / f"{ours}.export.yaml"
            figures["export"] = run("export", "--vhost", ours, "-o", str(exported), env=env)[0]
            started = time.perf_counter()
            definitions = client.vhost_definitions(ours)
            (tmp / f"{ours}.yaml.peer").write_text(yaml.safe_dump(definitions, sort_keys=False))
            figures["get_definitions"] = time.perf_counter() - started
            client.close()
        print(f"{objects}: {figures}", flush=True)

        figures["import"] = import_once(definitions_for(topology.vhosts[0].members()), ours)
    finally:
        print(f"{objects}: {figures}", flush=True)
    return figures


def render(results: dict[int, dict[str, float]], version: str, startup: dict[str, float]) -> str:
    sizes = sorted(results)
    small, large = sizes[0], sizes[-1]
    lines = [
        HEADING,
        "",
        "```bash",
        "bash scripts/setup.sh && source .rabbitry/env.sh   # a container engine",
        f".venv/bin/python bench/scale.py --sizes {','.join(map(str, sizes))} --write-docs"
        "   # --rounds 3 (default) up to 10,000 objects",
        "```",
        "",
        f"RabbitMQ {version}, {os.cpu_count()} cores, reference loop"
        f" {startup['reference']:.3f} s (bench/results.py: how fast this machine runs Python;"
        " figures without a peer compare across runs only beside it); every rabbitry figure"
        " is a whole CLI process."
        " The peer is the broker's own definitions import of the same primitives, in the same"
        " run; each side fills an empty vhost of a fresh broker of its own (same image, same"
        " machine); where a size ran several apply/import pairs (order alternating), the"
        " median of each side. Plan: median of 3 runs once the broker settled (60 s after the apply), and of"
        " 3 right after it; peak memory the largest of the 6.",
        "",
        "| step | "
        + " | ".join(f"{int(results[s]['objects']):,} objects" for s in sizes)
        + " | target |",
        "|---|" + "---|" * len(sizes) + "---|",
    ]

    def row(label: str, cells: list[str], target: str) -> None:
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {target} |")

    def rounds(s: int) -> str:
        n = int(results[s].get("rounds", 1))
        return f" (median of {n})" if n > 1 else ""

    def seconds(
        label: str, key: str, target: str = "", digits: int = 2, of_rounds: bool = False
    ) -> None:
        row(
            label,
            [
                "cut off (below)"
                if math.isnan(results[s][key])
                else f"{results[s][key]:.{digits}f} s{rounds(s) if of_rounds else ''}"
                for s in sizes
            ],
            target,
        )

    def times(label: str, key: str, peer: str, target: str = "") -> None:
        ratios = [results[s][key] / results[s][peer] for s in sizes]
        row(label, ["-" if math.isnan(r) else f"{r:.2f}x" for r in ratios], target)

    seconds("`rabbitry validate`", "validate", "<= 2 s at 50k")
    seconds("`rabbitry apply` (empty vhost)", "apply", digits=1, of_rounds=True)
    seconds("`POST /api/definitions/{vhost}`", "import", digits=1, of_rounds=True)
    times("apply / import", "apply", "import", "<= 1.0x")
    seconds("`rabbitry plan`, nothing to do", "plan", "<= 3 s at 50k")
    seconds("the broker's listing of the vhost (beside the settled plans)", "listing")
    times("plan / listing", "plan", "listing")
    seconds("a process making only the plan's reads (bench/reads_only.py)", "reads")
    times("plan / reads only", "plan", "reads")
    seconds("... right after the apply (broker still settling)", "plan_busy")
    row(
        "plan peak memory per object",
        [f"{results[s]['plan_rss_kib'] * 1.024 / results[s]['objects']:.1f} KB" for s in sizes],
        "<= 5 KB",
    )
    seconds("`rabbitry export`", "export")
    times("export / (GET definitions + YAML)", "export", "get_definitions", "<= 1.5x")
    if small != large:
        lines += [
            "",
            f"Growth from {int(results[small]['objects']):,} to {int(results[large]['objects']):,} objects ({results[large]['objects'] / results[small]['objects']:.1f}x the work; target <= 12x the time):",
            "",
        ]
        for step in ("validate", "plan", "apply", "export"):
            lines.append(f"- {step}: {results[large][step] / results[small][step]:.1f}x")
    if PEER_FAILURES:
        lines += ["", "The broker's own import was cut off (the connection closed, no answer):"]
        lines += ["", *(f"- {failure}" for failure in PEER_FAILURES)]
    lines += [
        "",
        f"Reference loop at the end of the run: {startup['reference_end']:.3f} s."
        " Start-up, median of 10 processes, taken at the start:"
        f" `rabbitry --version` {startup['version']:.3f} s"
        " (target <= 0.15 s), `rabbitry validate examples/shop.yaml`"
        f" {startup['validate_shop']:.3f} s (target <= 0.35 s).",
        "",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--sizes", default="5000,50000")
    parser.add_argument(
        "--write-docs", action="store_true", help="put the table in docs/benchmarks.md"
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="apply/import pairs (medians) at sizes up to --rounds-upto; larger sizes run once",
    )
    parser.add_argument("--rounds-upto", type=int, default=10000)
    args = parser.parse_args()
    startup = {
        "reference": reference_seconds(),
        "version": median_run(10, "--version"),
        "validate_shop": median_run(10, "validate", str(HERE.parent / "examples" / "shop.yaml")),
    }
    print(f"start-up: {startup}", flush=True)
    results: dict[int, dict[str, float]] = {}
    versions: set[str] = set()
    with tempfile.TemporaryDirectory() as tmp:
        for size in (int(s) for s in args.sizes.split(",")):
            results[size] = figures = one_size(size, Path(tmp), versions)
            if args.rounds > 1 and size <= args.rounds_upto:
                tag = uuid.uuid4().hex[:6]
                spec = Path(tmp) / f"rounds-{size}-{tag}.yaml"
                spec.write_text(spec_text(f"rounds-{tag}", f"rounds-{tag}", size))
                more_rounds(figures, spec, f"rounds-{tag}", args.rounds - 1)
    startup["reference_end"] = reference_seconds()  # the machine may have slowed meanwhile
    text = render(results, ", ".join(sorted(versions)), startup)
    print(text)
    if args.write_docs:
        write_section(HEADING, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
