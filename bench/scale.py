"""The provisioner at production size: validate, plan, apply and export of 5,000 and 50,000 objects.

Usage:  python bench/scale.py [--sizes 5000,50000] [--write-docs]
Broker: $RABBITRY_MANAGEMENT_URL and $RABBITRY_URL (``eval "$(rabbitry dev-broker env)"``).

Every rabbitry figure is a whole CLI process (start-up included), as a user runs it. The peer is
the broker's own definitions import of the same primitives (``POST /api/definitions/{vhost}``)
into another empty vhost of the same broker, in the same run, and for export
``GET /api/definitions/{vhost}`` plus writing it as YAML. Peak memory is the plan process's
maximum resident set.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import yaml
from results import arguments, one_vhost_spec, write_section

from rabbitry.provisioner.applier import definitions_for
from rabbitry.provisioner.management import ManagementClient, q
from rabbitry.topology import load_topology

HERE = Path(__file__).resolve().parent
RABBITRY = [str(Path(sys.executable).parent / "rabbitry")]
HEADING = "## Provisioning at scale (bench/scale.py)"
RETRY_QUEUES = 1000


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
    objects = {"exchanges": exchanges, "queues": queues, "bindings": bindings}
    return one_vhost_spec(stack, vhost, **objects, policies=policies, delays=[later])


def run(*argv: str) -> tuple[float, int, str]:
    """Run the CLI as a process: (seconds, peak RSS in KiB, output); raises on a failure."""
    started = time.perf_counter()
    proc = subprocess.Popen(
        [*RABBITRY, *argv], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode not in (0, 2):
        raise RuntimeError(f"rabbitry {' '.join(argv)} exited {proc.returncode}:\n{out[-3000:]}")
    return seconds, usage.ru_maxrss, out


def median_run(times: int, *argv: str) -> float:
    return statistics.median(run(*argv)[0] for _ in range(times))


def one_size(client: ManagementClient, objects: int, tmp: Path) -> dict[str, float]:
    tag = uuid.uuid4().hex[:6]
    ours, theirs = f"scale-{objects}-{tag}", f"scale-import-{objects}-{tag}"
    spec = tmp / f"{ours}.yaml"
    spec.write_text(spec_text(ours, ours, objects))
    topology = load_topology(spec)
    count = len(topology.resources()) - 1  # the vhost itself is not counted
    figures: dict[str, float] = {"objects": count}

    def remove(vhost: str) -> None:
        with client.clone() as cleaner:
            cleaner.delete(f"/vhosts/{q(vhost)}")
            if vhost == ours:
                cleaner.delete(f"/global-parameters/{q('rabbitry.stack.' + ours)}")

    # Each side creates its objects in a broker that holds none of the other's: a vhost's
    # imports slow down as the broker fills (quorum queues most), and the order would decide.
    try:
        figures["validate"] = run("validate", str(spec))[0]
        figures["apply"] = run("apply", str(spec), "--auto-approve")[0]

        seconds, rss, out = run("plan", str(spec), "--detailed-exitcode")
        assert "No changes" in out, out[-2000:]
        figures["plan"], figures["plan_rss_kib"] = seconds, rss

        exported = tmp / f"{ours}.export.yaml"
        figures["export"] = run("export", "--vhost", ours, "-o", str(exported))[0]
        started = time.perf_counter()
        definitions = client.vhost_definitions(ours)
        (tmp / f"{ours}.definitions.yaml").write_text(yaml.safe_dump(definitions, sort_keys=False))
        figures["get_definitions"] = time.perf_counter() - started
        print(f"{objects}: {figures}", flush=True)
        remove(ours)

        peer = load_topology(spec).vhosts[0].model_copy(update={"name": theirs})
        client.put(f"/vhosts/{q(theirs)}", {})
        started = time.perf_counter()
        client.import_definitions(definitions_for(peer.members()), theirs, timeout=3600)
        figures["import"] = time.perf_counter() - started
    finally:
        print(f"{objects}: {figures}", flush=True)  # before the clean-up, which may be slow
        for vhost in (ours, theirs):
            with contextlib.suppress(Exception):
                remove(vhost)
    return figures


def render(results: dict[int, dict[str, float]], version: str, startup: dict[str, float]) -> str:
    sizes = sorted(results)
    small, large = sizes[0], sizes[-1]
    lines = [
        HEADING,
        "",
        "```bash",
        'eval "$(rabbitry dev-broker env)"',
        f".venv/bin/python bench/scale.py --sizes {','.join(map(str, sizes))} --write-docs",
        "```",
        "",
        f"RabbitMQ {version}, {os.cpu_count()} cores; every rabbitry figure is a whole CLI process."
        " The peer is the broker's own definitions import of the same primitives into another"
        " vhost of the same broker in the same run, made after rabbitry's was deleted: each side"
        " fills an otherwise empty broker.",
        "",
        "| step | "
        + " | ".join(f"{int(results[s]['objects']):,} objects" for s in sizes)
        + " | target |",
        "|---|" + "---|" * len(sizes) + "---|",
    ]

    def row(label: str, cells: list[str], target: str) -> None:
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {target} |")

    row("`rabbitry validate`", [f"{results[s]['validate']:.2f} s" for s in sizes], "<= 2 s at 50k")
    row("`rabbitry apply` (empty vhost)", [f"{results[s]['apply']:.1f} s" for s in sizes], "")
    row("`POST /api/definitions/{vhost}`", [f"{results[s]['import']:.1f} s" for s in sizes], "")
    row(
        "apply / import",
        [f"{results[s]['apply'] / results[s]['import']:.2f}x" for s in sizes],
        "<= 1.0x",
    )
    row(
        "`rabbitry plan`, nothing to do",
        [f"{results[s]['plan']:.2f} s" for s in sizes],
        "<= 3 s at 50k",
    )
    row(
        "plan peak memory per object",
        [f"{results[s]['plan_rss_kib'] / results[s]['objects']:.1f} KiB" for s in sizes],
        "<= 5 KB",
    )
    row("`rabbitry export`", [f"{results[s]['export']:.2f} s" for s in sizes], "")
    row(
        "export / (GET definitions + YAML)",
        [f"{results[s]['export'] / results[s]['get_definitions']:.2f}x" for s in sizes],
        "<= 1.5x",
    )
    if small != large:
        lines += [
            "",
            f"Growth from {int(results[small]['objects']):,} to {int(results[large]['objects']):,} objects ({results[large]['objects'] / results[small]['objects']:.1f}x the work; target <= 12x the time):",
            "",
        ]
        for step in ("validate", "plan", "apply", "export"):
            lines.append(f"- {step}: {results[large][step] / results[small][step]:.1f}x")
    lines += [
        "",
        f"Start-up, median of 10 processes: `rabbitry --version` {startup['version']:.3f} s"
        " (target <= 0.15 s), `rabbitry validate examples/shop.yaml`"
        f" {startup['validate_shop']:.3f} s (target <= 0.35 s).",
        "",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = arguments(__doc__, "amqp://guest:guest@localhost:5672/%2F")
    parser.add_argument("--sizes", default="5000,50000")
    parser.add_argument("--management-url", default=os.environ.get("RABBITRY_MANAGEMENT_URL"))
    args = parser.parse_args()
    if not args.management_url:
        parser.error(
            "set --management-url or RABBITRY_MANAGEMENT_URL (eval $(rabbitry dev-broker env))"
        )
    os.environ["RABBITRY_MANAGEMENT_URL"] = args.management_url
    os.environ["RABBITRY_URL"] = args.url
    client = ManagementClient(args.management_url, timeout=3600)
    version = str(client.overview().get("rabbitmq_version"))
    startup = {
        "version": median_run(10, "--version"),
        "validate_shop": median_run(10, "validate", str(HERE.parent / "examples" / "shop.yaml")),
    }
    print(f"start-up: {startup}", flush=True)
    results: dict[int, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for size in (int(s) for s in args.sizes.split(",")):
            results[size] = one_size(client, size, Path(tmp))
    text = render(results, version, startup)
    print(text)
    if args.write_docs:
        write_section(HEADING, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
