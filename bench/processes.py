"""Worker processes on a CPU-bound handler: ``rabbitry worker run --processes 1`` against 2.

Usage:  python bench/processes.py [--jobs 600] [--loops 200000] [--rounds 2] [--prefetch 2]
        [--processes 1,2] [--write-docs]
Broker: $RABBITRY_URL / $RABBITRY_MANAGEMENT_URL (e.g. eval "$(rabbitry dev-broker env)").

A backlog of N jobs is published (with confirms) to a durable classic queue in a vhost of its
own; then ``rabbitry worker run cpu_jobs:app --sync --prefetch P --processes K`` drains it
(bench/cpu_jobs.py: each job is a fixed number of pure-Python multiply-adds, which hold the
GIL, then one ledger line). Timed from the first job's ledger line to the last one's, so the
children's start is not counted; rounds alternate the process counts (1, 2, 1, 2, ...) so both
see the same machine; a round stops the bench unless every job ran exactly once. Reported per
process count: the median round's jobs/s, the speed-up over one process, how many processes ran
jobs, the cores the worker processes used while draining (their CPU seconds, supervisor
included, over the wall time), and the load average around the rounds. The small prefetch
keeps one child from taking the whole backlog before the other consumes.

What to expect: one process runs the handlers on one core (the GIL), so two processes can at
most double the rate, and only with a second core to spare. On a machine whose cores are busy
with other work, the second process competes for the same CPU time and gains less.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cpu_jobs import work
from results import write_bench_section

from rabbitry.amqp.channel import Channel
from rabbitry.management.client import ManagementClient, q
from rabbitry.management.endpoints import resolve_endpoints
from rabbitry.publisher import Publisher

HERE = Path(__file__).resolve().parent
RABBITRY = str(Path(sys.executable).parent / "rabbitry")
HEADING = "## Worker processes on a CPU-bound handler (bench/processes.py)"
VHOST = "bench-processes"
QUEUE = "cpu"
TIMEOUT = 600.0
"""Seconds a round may take before the bench gives up on it."""


def session_cpu(session: int) -> float:
    """CPU seconds (user + system) of the processes of ``session`` alive now."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == session:  # session id; utime and stime follow at 11 and 12
                total += int(fields[11]) + int(fields[12])
    return total / tick


def one_round(
    url: str, processes: int, args: argparse.Namespace, tmp: Path, index: int
) -> tuple[float, int, float]:
    """Publish the backlog, drain it with ``processes`` worker processes; (jobs/s, processes
    that ran jobs, cores the worker processes used while they ran)."""
    with Channel(url) as channel:
        channel.queue_declare(QUEUE, durable=True)
        channel.queue_purge(QUEUE)
    with Publisher(url) as pub:
        done = pub.publish_many([str(i).encode() for i in range(args.jobs)], routing_key=QUEUE)
        if not all(d.ok for d in done):
            raise RuntimeError("the backlog was not stored")
    ledger = tmp / f"round-{index}.ledger"
    env = {
        **os.environ,
        "RABBITRY_URL": url,
        "CPU_JOB_LEDGER": str(ledger),
        "CPU_JOB_QUEUE": QUEUE,
        "CPU_JOB_LOOPS": str(args.loops),
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
    }
    command = [RABBITRY, "worker", "run", "cpu_jobs:app", "--sync", "--log-level", "error"]
    command += ["--prefetch", str(args.prefetch), "--processes", str(processes)]
    worker = subprocess.Popen(command, cwd=HERE, env=env, start_new_session=True)
    cpu_at_first = first_at = 0.0
    try:
        deadline = time.monotonic() + TIMEOUT
        lines: list[list[str]] = []
        while len(lines) < args.jobs:
            if time.monotonic() > deadline or worker.poll() is not None:
                raise RuntimeError(f"{processes} process(es): {len(lines)} of {args.jobs} jobs ran")
            time.sleep(0.1)
            if not first_at and ledger.exists() and ledger.stat().st_size:
                cpu_at_first, first_at = session_cpu(worker.pid), time.monotonic()
            lines = (
                [line.split() for line in ledger.read_text().splitlines()]
                if ledger.exists()
                else []
            )
        cores = (session_cpu(worker.pid) - cpu_at_first) / (time.monotonic() - first_at)
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        worker.wait(60)
    times = sorted(float(line[2]) for line in lines)
    if len(lines) != args.jobs or len({line[0] for line in lines}) != args.jobs:
        raise RuntimeError(f"{processes} process(es): some jobs ran twice or not at all")
    return (args.jobs - 1) / (times[-1] - times[0]), len({line[1] for line in lines}), cores


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--jobs", type=int, default=600)
    parser.add_argument("--loops", type=int, default=200_000, help="multiply-adds per job")
    parser.add_argument("--rounds", type=int, default=2, help="rounds per process count")
    parser.add_argument("--prefetch", type=int, default=2)
    parser.add_argument("--processes", default="1,2", help="process counts, comma-separated")
    parser.add_argument(
        "--write-docs", action="store_true", help="put the table in docs/benchmarks.md"
    )
    args = parser.parse_args()
    counts = [int(n) for n in args.processes.split(",")]
    endpoints = resolve_endpoints()
    client = ManagementClient(endpoints.management_url, timeout=60)
    client.delete(f"/vhosts/{q(VHOST)}")
    client.put(f"/vhosts/{q(VHOST)}", {})
    url = endpoints.amqp_url_for(VHOST)
    started = time.perf_counter()
    cpu = time.process_time()
    work(args.loops)
    job_cpu = time.process_time() - cpu
    job_wall = time.perf_counter() - started
    rates: dict[int, list[float]] = {n: [] for n in counts}
    seen: dict[int, set[int]] = {n: set() for n in counts}
    used: dict[int, list[float]] = {n: [] for n in counts}
    loads: list[float] = [os.getloadavg()[0]]
    try:
        with tempfile.TemporaryDirectory(prefix="processes-") as tmp:
            for r in range(args.rounds):
                for n in counts:
                    rate, ran, cores = one_round(url, n, args, Path(tmp), r * len(counts) + n)
                    rates[n].append(rate)
                    used[n].append(cores)
                    seen[n].add(ran)
                    loads.append(os.getloadavg()[0])
                    print(
                        f"  round {r + 1}: {n} process(es) {rate:,.1f} jobs/s, {ran} ran jobs,"
                        f" {cores:.2f} cores used, load {loads[-1]:.1f}",
                        flush=True,
                    )
    finally:
        client.delete(f"/vhosts/{q(VHOST)}")
    base = statistics.median(rates[counts[0]])
    rows = [
        "| processes | jobs/s (median) | rounds | speed-up over "
        f"{counts[0]} | processes that ran jobs | cores used (median) |",
        "|---|---|---|---|---|---|",
    ]
    for n in counts:
        median = statistics.median(rates[n])
        rows.append(
            f"| {n} | {median:,.1f} | {', '.join(f'{x:,.1f}' for x in rates[n])} |"
            f" {median / base:.2f}x | {', '.join(str(x) for x in sorted(seen[n]))} |"
            f" {statistics.median(used[n]):.2f} |"
        )
    version = client.overview().get("rabbitmq_version")
    header = (
        f"RabbitMQ {version}; {args.jobs} jobs of {args.loops:,} multiply-adds (one job: "
        f"{job_cpu * 1000:.1f} ms CPU, {job_wall * 1000:.1f} ms wall in the bench process),"
        f" prefetch {args.prefetch}, {args.rounds} rounds per process count;"
        f" {os.cpu_count()} cores; {time.strftime('%Y-%m-%d')}; load average"
        f" {min(loads):.1f}-{max(loads):.1f} during the rounds."
    )
    text = header + "\n\n" + "\n".join(rows) + "\n"
    print(text)
    if args.write_docs:
        command = (
            f".venv/bin/python bench/processes.py --jobs {args.jobs} --loops {args.loops}"
            f" --rounds {args.rounds} --prefetch {args.prefetch} --processes {args.processes}"
        )
        write_bench_section(HEADING, command, __doc__, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
