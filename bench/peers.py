"""Workers against their peers: rabbitry vs Celery, dramatiq and FastStream on drain, retry,
delay and crash.

Usage:  python bench/peers.py [--drain 50000] [--retry 20000] [--delay 5000] [--max-delay 20]
        [--queue-types classic,quorum] [--only celery,rabbitry-async,...] [--lanes 4] [--hops]
        [--write-docs]
Broker: $RABBITRY_URL / $RABBITRY_MANAGEMENT_URL (e.g. eval "$(rabbitry dev-broker env)").
Peers: installed from bench/peers-requirements.txt into bench/.peers-venv (made on first use,
never the project's environment); rabbitry runs from the interpreter running this script.

Every framework runs one worker process, started as its documentation says
(`celery -A ... worker`, `dramatiq ...`, `faststream run ...`, `rabbitry worker run`), in a
vhost of its own on the same broker, in the same run, once per queue type it can declare. Its
jobs are published with its own client and run the same job (bench/peer_jobs/ledger.py): each
run appends one line (job id, outcome, time, due time) to a ledger file with one O_APPEND
write, and the counts are read from the ledger by job id.
- drain: N no-op jobs published before the worker starts; jobs/s from the first job's run to
  the last one's; peak RSS of the worker process (VmHWM, the largest process of the worker).
- retry: M jobs whose first attempt fails, retried after 1 s by the framework's own retry;
  seconds from the first run to the last success; jobs done exactly once, lost, duplicated.
- delay: K jobs scheduled 1..D whole seconds ahead, published while the worker runs, each due
  time taken as its job is handed to the client; lateness (run - due) p50/p99/max, early, lost.
- crash: the retry scenario with the worker SIGKILLed (its whole process group) and restarted
  at once, twice: when two thirds of the first attempts ran, and when a third of the retries
  ran; lost and duplicated jobs.

A job is lost when it has not succeeded 30 s after the ledger stopped growing, or after the
worker started if it never grew (delay: 30 s after the last due time).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import venv
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from hops import HopObserver, delay_exchanges, hop_lateness, hop_table
from results import percentile, write_section

from rabbitry.management.client import ManagementClient, q
from rabbitry.management.endpoints import resolve_endpoints
from rabbitry.uri import mask_uri

HERE = Path(__file__).resolve().parent
JOBS = HERE / "peer_jobs"
sys.path.insert(0, str(JOBS))
from ledger import jobs as ledger_jobs  # noqa: E402 - the schedule every framework's jobs follow

PEERS_VENV = HERE / ".peers-venv"
REQUIREMENTS = HERE / "peers-requirements.txt"
RABBITRY = str(Path(sys.executable).parent / "rabbitry")
HEADING = "## Workers against Celery, dramatiq and FastStream (bench/peers.py)"
DRAIN_ONLY = "the first Celery row runs retries and countdowns"
"""Why a second Celery pool runs only the drain (its rows are left out of the other tables)."""
DELAY_ONLY = "the publisher's window matters only to the delay scenario"
"""Why the default-window rabbitry row runs only the delay (left out of the other tables)."""
LANES_ONLY = "delay lanes matter only to the delay scenario"
"""Why the rabbitry row with delay lanes runs only the delay (left out of the other tables)."""
LEFT_OUT = (DRAIN_ONLY, DELAY_ONLY, LANES_ONLY)
QUIET = 30.0
"""Seconds without a new ledger line after which the jobs not yet done count as lost."""

SPEC = """\
version: 1
name: {vhost}
vhosts:
  - name: {vhost}
    queues:
      - name: jobs
        type: {queue_type}
        retry: {{attempts: 2, backoff: [1s]}}
    delays:
      - {{name: delay, unit: 1s, max: {max_delay}s, lanes: {lanes}, queue_type: {queue_type}, targets: [{{queue: jobs}}]}}
"""


@dataclass(frozen=True)
class Contender:
    """One framework's worker: how it starts, what it cannot do, and the settings used."""

    key: str
    name: str
    module: str
    worker: tuple[str, ...]
    settings: str
    peer: bool = True
    cannot: dict[str, str] = field(default_factory=dict)
    """``"quorum"`` or a scenario -> why it is not run."""
    notes: dict[str, str] = field(default_factory=dict)
    """scenario -> what differs in how it ran."""
    env: dict[str, str] = field(default_factory=dict)
    """Environment of its job processes (worker and publisher)."""
    reference: bool = False
    """Shown for comparison only, not held to the targets."""
    lanes: int = 1
    """rabbitry: queues side by side per delay level (the spec's ``lanes``)."""


def celery(pool: str, threads: int, first: bool) -> Contender:
    """Celery's worker on one pool; pools after the first run the drain only."""
    py = str(PEERS_VENV / "bin" / "python")
    concurrency = str(threads)  # solo runs one at a time but its prefetch still counts these
    return Contender(
        f"celery-{pool}",
        f"Celery ({pool} pool)",
        "celery_jobs",
        (
            *(py, "-m", "celery", "-A", "celery_jobs", "worker", "-P", pool, "-c", concurrency),
            *("--prefetch-multiplier", "64", "-Q", "jobs", "--without-gossip", "--without-mingle"),
            *("--without-heartbeat", "-l", "WARNING"),
        ),
        (
            f"`-P {pool} -c {concurrency}`, `worker_prefetch_multiplier=64`, `task_acks_late`,"
            " `task_reject_on_worker_lost`, `confirm_publish`; quorum: `task_default_queue_type="
            "quorum` on a topic exchange (native delayed delivery); retry"
            " `self.retry(countdown=1)`, delay `countdown=`"
            if first
            else f"`-P {pool}`, otherwise as above"
        ),
        cannot={} if first else dict.fromkeys(("retry", "crash", "delay"), DRAIN_ONLY),
    )


def delay_reference(
    key: str,
    name: str,
    variant: str,
    why_delay_only: str,
    env: dict[str, str] | None = None,
    lanes: int = 1,
) -> Contender:
    """The asyncio rabbitry worker again with one setting changed (``variant`` says which),
    run on the delay scenario only and shown for comparison, not held to the targets."""
    return Contender(
        key,
        name,
        "rabbitry_jobs",
        (RABBITRY, "worker", "run", "rabbitry_jobs:app", "--log-level", "error"),
        f"the asyncio worker again, {variant}: for comparison, not held to the targets",
        peer=False,
        reference=True,
        cannot=dict.fromkeys(("drain", "retry", "crash"), why_delay_only),
        env=env or {},
        lanes=lanes,
    )


def contenders(celery_pools: list[str], threads: int, lanes: int = 4) -> list[Contender]:
    py = str(PEERS_VENV / "bin" / "python")
    return [
        *(celery(pool, threads, i == 0) for i, pool in enumerate(celery_pools)),
        Contender(
            "dramatiq",
            "dramatiq",
            "dramatiq_jobs",
            (
                py,
                "-m",
                "dramatiq",
                "dramatiq_jobs",
                "--processes",
                "1",
                "--threads",
                str(threads),
                "--queues",
                "jobs",
            ),
            f"RabbitmqBroker(`confirm_delivery=True`), `--processes 1 --threads {threads}`, default"
            " prefetch (2 x threads); retry `raise Retry(delay=1000)`, delay"
            " `send_with_options(delay=)` (both held by the worker until due)",
            cannot={"quorum": "its RabbitmqBroker declares classic queues only"},
        ),
        Contender(
            "faststream",
            "FastStream",
            "faststream_jobs",
            (py, "-m", "faststream", "run", "faststream_jobs:app"),
            "RabbitBroker, `Channel(prefetch_count=300)`, `AckPolicy.NACK_ON_ERROR`; quorum via"
            " `RabbitQueue(queue_type=QUORUM)`",
            cannot={"delay": "no delayed delivery without the delayed-message plugin"},
            notes={
                "retry": "no delayed retry: nacked and redelivered at once",
                "crash": "no delayed retry: nacked and redelivered at once",
            },
        ),
        Contender(
            "rabbitry-async",
            "rabbitry worker run",
            "rabbitry_jobs",
            (RABBITRY, "worker", "run", "rabbitry_jobs:app", "--log-level", "error"),
            "defaults (prefetch 300, asyncio); spec `retry: {attempts: 2, backoff: [1s]}`,"
            " delay levels of 1 s (`delay=`); the spec applied and validated beforehand"
            " (`rabbitry validate`), so the worker reads its cached worker view; jobs published"
            " by `Publisher.stream` at its defaults (the adaptive window, docs/publisher.md)",
            peer=False,
        ),
        Contender(
            "rabbitry-sync",
            "rabbitry worker run --sync",
            "rabbitry_jobs",
            (RABBITRY, "worker", "run", "rabbitry_jobs:app", "--sync", "--log-level", "error"),
            "as above, blocking worker",
            peer=False,
        ),
        delay_reference(
            "rabbitry-no-delayed-limit",
            "rabbitry worker run, jobs published without the delayed-message limit",
            "its delayed jobs published by the adaptive window without its limit for delayed"
            " messages (`WindowRule(delayed=512)`: the rule before that limit)",
            DELAY_ONLY,
            env={"PEERS_DELAYED_LIMIT": "512"},
        ),
        delay_reference(
            "rabbitry-window-512",
            "rabbitry worker run, jobs published with window 512",
            "its delayed jobs published with `window=512`, the fixed default before the"
            " adaptive window",
            DELAY_ONLY,
            env={"PEERS_WINDOW": "512"},
        ),
        delay_reference(
            "rabbitry-lanes",
            f"rabbitry worker run, delay levels of {lanes} lanes",
            f"its delay declared with `lanes: {lanes}` ({lanes} queues per level, the publisher"
            " taking them in turn)",
            LANES_ONLY,
            lanes=lanes,
        ),
    ]


# -- environments ---------------------------------------------------------------------------------


def peers_python() -> Path:
    """bench/.peers-venv/bin/python with the pinned peers installed (made on first use)."""
    python = PEERS_VENV / "bin" / "python"
    stamp = PEERS_VENV / "requirements.txt"
    if not python.exists():
        venv.create(PEERS_VENV, with_pip=True)
    if not stamp.exists() or stamp.read_text() != REQUIREMENTS.read_text():
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", "-r", str(REQUIREMENTS)], check=True
        )
        shutil.copy(REQUIREMENTS, stamp)
    return python


def peer_versions(python: Path) -> str:
    out = subprocess.run(
        [
            str(python),
            "-c",
            "import importlib.metadata as m;"
            "print(', '.join(f'{p} {m.version(p)}' for p in"
            " ('celery', 'kombu', 'dramatiq', 'faststream', 'aio-pika')))",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()


# -- one worker ------------------------------------------------------------------------------------


class Ledger:
    """The lines a scenario's jobs appended, read as they come."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.ok: Counter[int] = Counter()
        self.ok_times: dict[int, float] = {}
        self.due: dict[int, float] = {}
        self.first = 0.0
        self.lines = 0
        self.last_line = time.monotonic()

    def read(self) -> None:
        if not self.path.exists():
            return
        with self.path.open("rb") as f:
            f.seek(self.offset)
            data = f.read()
        end = data.rfind(b"\n") + 1
        self.offset += end
        if end:
            self.last_line = time.monotonic()
        for line in data[:end].splitlines():
            self.lines += 1
            job, outcome, at, due = line.split()
            if not self.first:
                self.first = float(at)
            if outcome == b"ok":
                job_id = int(job)
                self.ok[job_id] += 1
                self.ok_times.setdefault(job_id, float(at))
                self.due[job_id] = float(due)

    def done(self, ids: range) -> int:
        return sum(1 for i in ids if self.ok[i])


class WorkerProcess:
    """A framework's worker in a session of its own, so a SIGKILL reaches all its processes."""

    def __init__(self, argv: tuple[str, ...], env: dict[str, str], log: Path) -> None:
        self.argv, self.env, self.log = argv, env, log
        self.peak_kib = 0
        self.start()

    def start(self) -> None:
        self.proc = subprocess.Popen(
            self.argv,
            cwd=JOBS,
            env=self.env,
            start_new_session=True,
            stdout=self.log.open("ab"),
            stderr=subprocess.STDOUT,
        )

    def pids(self) -> list[int]:
        found = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    stat = (entry / "stat").read_text()
                except OSError:
                    continue
                if int(stat.rsplit(")", 1)[1].split()[3]) == self.proc.pid:  # session id
                    found.append(int(entry.name))
        return found

    def sample(self) -> None:
        """Keep the largest VmHWM (peak resident set) of any process of the worker."""
        for pid in self.pids():
            try:
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmHWM:"):
                        self.peak_kib = max(self.peak_kib, int(line.split()[1]))
            except OSError:
                pass

    def kill(self) -> None:
        self.sample()
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        self.sample()
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        with contextlib.suppress(ProcessLookupError):  # anything the worker left behind
            os.killpg(self.proc.pid, signal.SIGKILL)


@dataclass
class Outcome:
    """What one scenario of one contender on one queue type gave."""

    jobs: int
    seconds: float = 0.0
    exactly_once: int = 0
    lost: int = 0
    duplicated: int = 0
    peak_mib: float = 0.0
    lateness_ms: list[float] = field(default_factory=list)
    early: int = 0
    kills: int = 0
    skipped: str = ""
    hops: dict[str, list[float]] = field(default_factory=dict)
    """``--hops``: per hop of the delay path, each job's time beyond the hop's own (ms)."""

    @property
    def rate(self) -> float:
        return self.jobs / self.seconds if self.seconds else 0.0


class Bench:
    def __init__(self, args: argparse.Namespace, tmp: Path) -> None:
        self.args, self.tmp = args, tmp
        self.endpoints = resolve_endpoints()
        self.client = ManagementClient(self.endpoints.management_url, timeout=120)
        self.peers_python = str(peers_python())

    def env(
        self, contender: Contender, vhost: str, qt: str, scenario: str, ledger: Path
    ) -> dict[str, str]:
        path = [str(JOBS)]
        if not contender.peer:
            path += [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
            path.append(str(HERE.parent))
        return {
            **os.environ,
            **contender.env,
            "PYTHONPATH": os.pathsep.join(path),
            "PEERS_URL": self.endpoints.amqp_url_for(vhost),
            "RABBITRY_URL": self.endpoints.amqp_url_for(vhost),
            "PEERS_VHOST": vhost,
            "PEERS_QUEUE_TYPE": qt,
            "PEERS_SCENARIO": scenario,
            "PEERS_LEDGER": str(ledger),
            "PEERS_SPEC": str(self.tmp / f"{vhost}.yaml") if not contender.peer else "",
        }

    def fresh_vhost(self, contender: Contender, qt: str, scenario: str) -> str:
        vhost = f"peers-{contender.key}-{qt}-{scenario}"
        self.drop_vhost(vhost)
        if contender.peer:
            self.client.put(f"/vhosts/{q(vhost)}", {})
        else:
            spec = self.tmp / f"{vhost}.yaml"
            spec.write_text(
                SPEC.format(
                    vhost=vhost,
                    queue_type=qt,
                    max_delay=max(self.args.max_delay, 2),
                    lanes=contender.lanes,
                )
            )
            done = subprocess.run(
                [RABBITRY, "apply", str(spec), "--auto-approve"], capture_output=True, text=True
            )
            if done.returncode not in (0, 2):
                raise RuntimeError(f"rabbitry apply {vhost} failed:\n{done.stdout}{done.stderr}")
            # as docs/worker.md advises for deployments: the worker then reads the spec's cached
            # worker view instead of validating it (its first start would do the same)
            done = subprocess.run([RABBITRY, "validate", str(spec)], capture_output=True, text=True)
            if done.returncode != 0:
                raise RuntimeError(f"rabbitry validate {vhost}:\n{done.stdout}{done.stderr}")
        return vhost

    def drop_vhost(self, vhost: str) -> None:
        for path in (f"/vhosts/{q(vhost)}", f"/global-parameters/{q('rabbitry.stack.' + vhost)}"):
            self.client.delete(path)  # already gone is fine

    def publish(
        self, contender: Contender, env: dict[str, str], first: int, count: int, max_delay: int
    ) -> subprocess.Popen[bytes]:
        python = self.peers_python if contender.peer else sys.executable
        return subprocess.Popen(
            [python, f"{contender.module}.py", "publish", str(first), str(count), str(max_delay)],
            cwd=JOBS,
            env=env,
        )

    def run(self, contender: Contender, qt: str, scenario: str, n: int) -> Outcome:
        why = contender.cannot.get(scenario) or (qt == "quorum" and contender.cannot.get("quorum"))
        if why:
            return Outcome(n, skipped=why)
        vhost = self.fresh_vhost(contender, qt, scenario)
        ledger_path = self.tmp / f"{vhost}.ledger"
        log = self.tmp / f"{vhost}.log"
        env = self.env(contender, vhost, qt, scenario, ledger_path)
        ledger = Ledger(ledger_path)
        ids = range(n)
        try:
            if scenario == "delay":
                return self.delayed(contender, env, ledger, log, n, vhost)
            if self.publish(contender, env, 0, n, 0).wait() != 0:
                raise RuntimeError(f"{contender.name}: publishing failed")
            worker = WorkerProcess(contender.worker, env, log)
            # the quiet time counts from the worker's start: publishing N jobs with confirms
            # may itself take longer than QUIET (Celery's 50,000 on quorum queues did, and its
            # drain ended before its worker ran a job)
            ledger.last_line = time.monotonic()
            # kill once two thirds of the first attempts ran (their retries in flight), then
            # once a third of the retries ran, each time after the worker wrote a line
            kills = [2 * n // 3, 4 * n // 3] if scenario == "crash" else []
            killed, lines_at_start = 0, 0
            try:
                while True:
                    time.sleep(0.02)
                    ledger.read()
                    done = len(ledger.ok)
                    if kills and ledger.lines >= kills[0] and ledger.lines > lines_at_start:
                        kills.pop(0)
                        killed += 1
                        worker.kill()
                        lines_at_start = ledger.lines
                        worker.start()
                    if done >= n or time.monotonic() - ledger.last_line > QUIET:
                        break
                    if worker.proc.poll() is not None:
                        raise RuntimeError(
                            f"{contender.name} worker exited: {log.read_text()[-2000:]}"
                        )
                    worker.sample()
                if scenario != "drain":  # late duplicates show up after the last first success
                    time.sleep(2)
                    ledger.read()
            finally:
                worker.stop()
            outcome = self.counted(ledger, ids, worker.peak_kib)
            outcome.kills = killed
            return outcome
        finally:
            self.drop_vhost(vhost)

    def delayed(
        self,
        contender: Contender,
        env: dict[str, str],
        ledger: Ledger,
        log: Path,
        n: int,
        vhost: str,
    ) -> Outcome:
        worker = WorkerProcess(contender.worker, env, log)
        observer = None
        try:
            self.publish(contender, env, -1, 1, 0).wait()  # runs once the worker is up
            deadline = time.monotonic() + 120
            while not ledger.ok[-1]:
                if time.monotonic() > deadline or worker.proc.poll() is not None:
                    raise RuntimeError(
                        f"{contender.name} worker never ran a job: {log.read_text()[-2000:]}"
                    )
                time.sleep(0.05)
                ledger.read()
            if self.args.hops:  # the worker declared its delay path by now (kombu's too)
                names = [e["name"] for e in self.client.get(f"/exchanges/{q(vhost)}")]
                levels = max(self.args.max_delay, 1).bit_length()
                observer = HopObserver(env["PEERS_URL"], delay_exchanges(names, levels))
            started = time.monotonic()
            if self.publish(contender, env, 0, n, self.args.max_delay).wait() != 0:
                raise RuntimeError(f"{contender.name}: publishing failed")
            deadline = started + self.args.max_delay + QUIET + (time.monotonic() - started)
            while ledger.done(range(n)) < n and time.monotonic() < deadline:
                time.sleep(0.05)
                ledger.read()
                worker.sample()
            time.sleep(1)
            ledger.read()
        finally:
            worker.stop()
            if observer is not None:
                observer.stop()
        outcome = self.counted(ledger, range(n), worker.peak_kib)
        if observer is not None:
            delays = dict(ledger_jobs(0, n, self.args.max_delay))
            handed = {i: ledger.due[i] - delays[i] for i in ledger.due if i in delays}
            outcome.hops = hop_lateness(observer.seen, handed, ledger.ok_times, delays)
        outcome.lateness_ms = [
            (ledger.ok_times[i] - ledger.due[i]) * 1000 for i in range(n) if ledger.ok[i]
        ]
        outcome.early = sum(1 for x in outcome.lateness_ms if x < 0)
        return outcome

    @staticmethod
    def counted(ledger: Ledger, ids: range, peak_kib: int) -> Outcome:
        runs = [ledger.ok[i] for i in ids]
        last = max((ledger.ok_times[i] for i in ids if ledger.ok[i]), default=ledger.first)
        return Outcome(
            jobs=len(ids),
            seconds=last - ledger.first,
            exactly_once=sum(1 for r in runs if r == 1),
            lost=sum(1 for r in runs if r == 0),
            duplicated=sum(1 for r in runs if r > 1),
            peak_mib=peak_kib / 1024,
        )


# -- report ----------------------------------------------------------------------------------------


Results = dict[tuple[str, str, str], Outcome]


TITLES = {
    "drain": "Drain (no-op jobs published beforehand)",
    "retry": "Retry (every job fails its first attempt, retried after 1 s)",
    "crash": "Crash (the retry scenario, the worker SIGKILLed twice and restarted)",
    "delay": "Delay (jobs scheduled {max_delay} s ahead at most, whole seconds)",
}
COLUMNS = {
    "drain": ("jobs/s", "peak RSS MiB"),
    "retry": ("seconds", "exactly once", "lost", "duplicated", "note"),
    "crash": ("exactly once", "lost", "duplicated", "kills", "note"),
    "delay": ("lateness p50 ms", "p99 ms", "max ms", "early", "lost"),
}


def cells(o: Outcome, scenario: str, note: str) -> list[str]:
    """One row's figures for ``scenario`` (``o`` ran)."""
    if scenario == "drain":
        return [f"{o.rate:,.0f}", f"{o.peak_mib:.0f}"]
    if scenario == "retry":
        return [f"{o.seconds:.1f}", f"{o.exactly_once:,}", f"{o.lost:,}", f"{o.duplicated:,}", note]
    if scenario == "crash":
        return [f"{o.exactly_once:,}", f"{o.lost:,}", f"{o.duplicated:,}", str(o.kills), note]
    late = o.lateness_ms or [float("nan")]
    return [
        f"{statistics.median(late):.1f}",
        f"{percentile(late, 99):.1f}",
        f"{max(late):.1f}",
        f"{o.early:,}",
        f"{o.lost:,}",
    ]


def render(
    results: Results, everyone: list[Contender], args: argparse.Namespace, header: str
) -> str:
    lines = [header]
    for scenario, title in TITLES.items():
        rows = [
            (c, qt, o)
            for qt in args.queue_types
            for c in everyone
            if (o := results.get((c.key, qt, scenario))) is not None and o.skipped not in LEFT_OUT
        ]
        if not rows:
            continue
        columns = COLUMNS[scenario]
        lines += ["", title.format(max_delay=args.max_delay) + ":", ""]
        lines.append("| worker | queue | " + " | ".join(columns) + " |")
        lines.append("|---|---|" + "---|" * len(columns))
        for c, qt, o in rows:
            figures = (
                [f"n/a: {o.skipped}"] + [""] * (len(columns) - 1)
                if o.skipped
                else cells(o, scenario, c.notes.get(scenario, ""))
            )
            lines.append(f"| {c.name} | {qt} | " + " | ".join(figures) + " |")
    lines += ["", targets(results, everyone, args.queue_types), ""]
    return "\n".join(lines)


def hops_section(results: Results, everyone: list[Contender], qts: list[str]) -> str:
    """The delay scenario's lateness split by hop (``--hops``, bench/hops.py)."""
    rows = [
        row
        for qt in qts
        for c in everyone
        if (o := results.get((c.key, qt, "delay"))) is not None and o.hops
        for row in hop_table(f"{c.name} | {qt}", o.hops)
    ]
    head = [
        "Delay lateness by hop (ms beyond the hop's own time; bench/hops.py):",
        "",
        "| worker | queue | hop | jobs | p50 ms | p99 ms | max ms |",
        "|---|---|---|---|---|---|---|",
    ]
    return "\n".join(head + rows) + "\n" if rows else ""


def targets(results: Results, everyone: list[Contender], qts: list[str]) -> str:
    ours = [c for c in everyone if not c.peer and not c.reference]
    peers = [c for c in everyone if c.peer]
    rows = ["| target | measured | met |", "|---|---|---|"]

    def got(c: Contender, qt: str, scenario: str) -> Outcome | None:
        o = results.get((c.key, qt, scenario))
        return o if o is not None and not o.skipped else None

    for qt in qts:
        best = max((o.rate for c in peers if (o := got(c, qt, "drain"))), default=0.0)
        mine = max((o.rate for c in ours if (o := got(c, qt, "drain"))), default=0.0)
        if best and mine:
            rows.append(
                f"| rabbitry drain >= 3x the fastest peer ({qt}) | {mine / best:.2f}x | {'yes' if mine >= 3 * best else 'no'} |"
            )
    for scenario in ("retry", "crash"):
        lost = [o.lost for c in ours for qt in qts if (o := got(c, qt, scenario))]
        if lost:
            rows.append(
                f"| rabbitry {scenario}: 0 lost | {sum(lost)} | {'yes' if not sum(lost) else 'no'} |"
            )
    for c in ours:
        for qt in qts:
            o = got(c, qt, "delay")
            if o and o.lateness_ms:
                p99 = percentile(o.lateness_ms, 99)
                ok = p99 <= 50 and o.early == 0 and o.lost == 0
                rows.append(
                    f"| {c.name} delay ({qt}): p99 <= 50 ms, 0 early, 0 lost | {p99:.1f} ms, {o.early} early, {o.lost} lost | {'yes' if ok else 'no'} |"
                )
    lean = min((o.peak_mib for c in peers for qt in qts if (o := got(c, qt, "drain"))), default=0.0)
    mine_mem = max(
        (o.peak_mib for c in ours for qt in qts if (o := got(c, qt, "drain"))), default=0.0
    )
    if lean and mine_mem:
        rows.append(
            f"| rabbitry peak RSS <= the leanest peer | {mine_mem:.0f} MiB vs {lean:.0f} MiB | {'yes' if mine_mem <= lean else 'no'} |"
        )
    return "Targets:\n\n" + "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--drain", type=int, default=50_000)
    parser.add_argument("--retry", type=int, default=20_000)
    parser.add_argument("--delay", type=int, default=5_000)
    parser.add_argument("--max-delay", type=int, default=20, help="delays are 1..this many s")
    parser.add_argument("--queue-types", default="classic,quorum")
    parser.add_argument("--scenarios", default="drain,retry,delay,crash")
    parser.add_argument("--only", default="", help="contender keys, comma-separated")
    parser.add_argument(
        "--celery-pools",
        default="threads,solo",
        help="Celery pools (threads, gevent, solo, prefork): the first runs every scenario,"
        " the others the drain (solo, inline in the main process, drained fastest here;"
        " gevent was slower than threads)",
    )
    parser.add_argument("--threads", type=int, default=8, help="Celery and dramatiq threads")
    parser.add_argument(
        "--lanes", type=int, default=4, help="delay lanes of the rabbitry-lanes contender"
    )
    parser.add_argument(
        "--hops",
        action="store_true",
        help="delay: watch each exchange of the delay path and split each job's lateness by hop"
        " (bench/hops.py)",
    )
    parser.add_argument(
        "--write-docs", action="store_true", help="put the tables in docs/benchmarks.md"
    )
    args = parser.parse_args()
    args.queue_types = args.queue_types.split(",")
    everyone = contenders(args.celery_pools.split(","), args.threads, args.lanes)
    if args.only:
        keys = args.only.split(",")
        everyone = [c for c in everyone if c.key in keys]
    sizes = {"drain": args.drain, "retry": args.retry, "crash": args.retry, "delay": args.delay}
    scenarios = [s for s in args.scenarios.split(",") if s]
    results: Results = {}
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="peers-") as tmp:
        os.environ["RABBITRY_CACHE_DIR"] = str(Path(tmp) / "cache")  # worker views of this run
        bench = Bench(args, Path(tmp))
        versions = peer_versions(Path(bench.peers_python))
        print(f"broker {mask_uri(bench.endpoints.amqp_url)}; {versions}", flush=True)
        for scenario in scenarios:
            for qt in args.queue_types:
                for c in everyone:
                    o = bench.run(c, qt, scenario, sizes[scenario])
                    results[(c.key, qt, scenario)] = o
                    print(
                        f"  {scenario:6} {qt:8} {c.name:28} {o.skipped or f'{o.rate:,.0f} jobs/s, {o.seconds:.1f} s, once {o.exactly_once}, lost {o.lost}, dup {o.duplicated}, kills {o.kills}, {o.peak_mib:.0f} MiB'}",
                        flush=True,
                    )
        rabbitmq = bench.client.overview().get("rabbitmq_version")
    load_after = os.getloadavg()
    header = (
        f"RabbitMQ {rabbitmq}; {versions}; "
        + ", ".join(f"{scenario} {sizes[scenario]:,} jobs" for scenario in scenarios)
        + f"; {time.strftime('%Y-%m-%d')}; load average"
        f" {load_before[0]:.2f} before, {load_after[0]:.2f} after."
    )
    text = render(results, everyone, args, header)
    if args.hops:
        text += "\n" + hops_section(results, everyone, args.queue_types)
    print(text)
    if args.write_docs:
        write_section(HEADING, section(args, everyone, text))
    return 0


def section(args: argparse.Namespace, everyone: list[Contender], table: str) -> str:
    settings = "\n".join(
        f"- {c.name}: {c.settings}."
        + "".join(
            f" Not run: {', '.join(w for w, y in c.cannot.items() if y == why)} ({why})."
            for why in dict.fromkeys(c.cannot.values())
        )
        + "".join(f" Retry: {how}." for what, how in c.notes.items() if what == "retry")
        for c in everyone
    )
    return "\n".join(
        [
            HEADING,
            "",
            "```bash",
            f".venv/bin/python bench/peers.py --drain {args.drain} --retry {args.retry} --delay {args.delay} --max-delay {args.max_delay} --write-docs",
            "```",
            "",
            "The peers come from `bench/peers-requirements.txt` (pinned), installed by the script"
            " into a virtualenv of their own, `bench/.peers-venv`, never into the project's; by"
            " hand: `python -m venv bench/.peers-venv && bench/.peers-venv/bin/pip install -r"
            " bench/peers-requirements.txt`. rabbitry runs from the project's `.venv`.",
            "",
            "Every framework " + (__doc__ or "").split("Every framework", 1)[1].strip(),
            "",
            "Settings, each from its framework's documentation (bench/peer_jobs/ says where):",
            "",
            settings,
            "",
            table,
        ]
    )


if __name__ == "__main__":
    sys.exit(main())
