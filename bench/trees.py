"""Two trees of rabbitry, before and after a change, on the same broker in one run.

Usage:  python bench/trees.py --before REV [--after REV] [--rounds 3] [--messages 20000]
        [--objects 5000] [--url URL] [--management-url URL]
Each tree is checked out (``git archive``) into a folder of its own and run from there
(``PYTHONPATH=<tree>``, one process per tree and measurement), the trees' order alternating
from round to round, so that both see the same broker and the same load:
- publish: the tree's own ``bench/publish.py`` contenders ``rabbitry_sync`` and
  ``rabbitry_async`` (confirms on, 1 KB persistent messages, a classic queue);
- consume: its ``bench/consume.py`` ``fill`` then ``rabbitry_sync`` / ``rabbitry_async``;
- apply: ``rabbitry apply --auto-approve`` of ``bench/provision.py``'s spec of ``--objects``
  objects (a third each exchanges, queues, bindings, and policies) into a fresh vhost, the
  whole CLI process timed (start-up included);
- plan: ``rabbitry plan`` of the same spec against the applied vhost (no changes), the whole
  process.
Each tree's modules are compiled to bytecode once before the runs, as an installed package's are.
Reported: medians per tree, after/before ratios of the rates (throughput) and of the client
CPU per message (the steadier figure on a shared machine) or the wall time (plan, apply).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path
from typing import Any

from results import arguments, load_average

ROOT = Path(__file__).resolve().parent.parent

DRIVER = """
import json, sys
sys.path.insert(0, "bench")
kind, url, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
if kind in ("pub", "apub"):
    import publish
    run = publish.rabbitry_sync if kind == "pub" else publish.rabbitry_async
    r = run(url, "classic", n, True)
else:
    import consume
    queue = consume.fill(url, "classic", n)
    run = consume.rabbitry_sync if kind == "work" else consume.rabbitry_async
    r = run(url, queue, "classic", n)
print(json.dumps({"rate": r.rate, "cpu100k": r.cpu_per_100k}))
"""

CLIENTS = {
    "pub": "rabbitry Publisher",
    "apub": "rabbitry AsyncPublisher",
    "work": "rabbitry Worker",
    "awork": "rabbitry AsyncWorker",
}


def checkout(rev: str, into: Path) -> Path:
    """The tree of ``rev`` in a folder of its own (the commit's files, no .git)."""
    sha = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", rev],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    tree = into / sha
    data = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", rev], check=True, capture_output=True
    ).stdout
    with tarfile.open(fileobj=BytesIO(data)) as tar:
        tar.extractall(tree, filter="data")
    # compiled once, as an installed package is: a tree with more modules would otherwise pay
    # for compiling them in every timed process (PYTHONDONTWRITEBYTECODE is often set in CI)
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree / "rabbitry")], check=True)
    return tree


def run_in(tree: Path, args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args,
        cwd=tree,
        env={**env, "PYTHONPATH": str(tree), "PYTHONDONTWRITEBYTECODE": "1"},
        capture_output=True,
        text=True,
        check=False,
    )


def client_run(tree: Path, kind: str, url: str, n: int, env: dict[str, str]) -> dict[str, float]:
    done = run_in(tree, [sys.executable, "-c", DRIVER, kind, url, str(n)], env)
    if done.returncode != 0:
        raise SystemExit(f"{tree.name} {kind}: {done.stderr[-2000:]}")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def cli_seconds(tree: Path, args: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    done = run_in(tree, [sys.executable, "-c", "from rabbitry.cli import main; main()", *args], env)
    seconds = time.perf_counter() - t0
    if done.returncode not in (0, 2):  # plan exits 2 with --detailed-exitcode only
        raise SystemExit(f"{tree.name} {' '.join(args[:1])}: {done.stderr[-2000:]}")
    return seconds


def spec_file(tree: Path, vhost: str, objects: int, into: Path) -> Path:
    scale = max(1, objects // 6)  # provision.spec_text: 6 objects per step, and policies
    code = (
        "import sys; sys.path.insert(0, 'bench'); import provision; "
        f"print(provision.spec_text({vhost!r}, {scale}))"
    )
    done = run_in(tree, [sys.executable, "-c", code], dict(os.environ))
    if done.returncode != 0 or not done.stdout.strip():
        raise SystemExit(f"{tree.name}: no spec from bench/provision.py: {done.stderr[-2000:]}")
    path = into / f"{tree.name}-{vhost}.yaml"
    path.write_text(done.stdout)
    return path


def delete_vhost(management_url: str, vhost: str) -> None:
    from rabbitry.management.client import ManagementClient

    with ManagementClient(management_url, timeout=600.0) as client:  # 50,000 objects go slowly
        client.delete(f"/vhosts/{vhost}", missing_ok=True)


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def main() -> None:
    parser = arguments(__doc__, "amqp://guest:guest@localhost:5672/")
    parser.add_argument("--before", required=True, help="the tree before (a git revision)")
    parser.add_argument("--after", default="HEAD", help="the tree after (default: HEAD)")
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--objects", type=int, default=5_000)
    parser.add_argument("--management-url", default=os.environ.get("RABBITRY_MANAGEMENT_URL"))
    parser.add_argument("--only", default="pub,apub,work,awork,apply,plan")
    args = parser.parse_args()
    if not args.management_url:
        raise SystemExit("--management-url (or RABBITRY_MANAGEMENT_URL) is needed for apply/plan")
    only = args.only.split(",")
    env = {**os.environ, "RABBITRY_URL": args.url, "RABBITRY_MANAGEMENT_URL": args.management_url}
    results: dict[tuple[str, str], list[dict[str, float]]] = {}
    print(f"load {load_average()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="rabbitry-trees-") as tmp:
        before = checkout(args.before, Path(tmp))
        after = checkout(args.after, Path(tmp))
        trees = {"before": before, "after": after}
        provisioning = "apply" in only or "plan" in only  # plan reads the vhost apply made
        specs = {
            side: spec_file(tree, f"bench.trees.{side}", args.objects, Path(tmp))
            for side, tree in trees.items()
            if provisioning
        }
        for r in range(args.rounds):
            order = ["before", "after"] if r % 2 == 0 else ["after", "before"]
            for side in order:
                tree = trees[side]
                for kind in CLIENTS:
                    if kind in only:
                        got = client_run(tree, kind, args.url, args.messages, env)
                        results.setdefault((kind, side), []).append(got)
                if provisioning:
                    vhost, spec = f"bench.trees.{side}", specs[side]
                    delete_vhost(args.management_url, vhost)
                    seconds = cli_seconds(tree, ["apply", str(spec), "--auto-approve"], env)
                    results.setdefault(("apply", side), []).append({"seconds": seconds})
                    seconds = cli_seconds(tree, ["plan", str(spec)], env)
                    results.setdefault(("plan", side), []).append({"seconds": seconds})
                    delete_vhost(args.management_url, vhost)
                print(f"round {r + 1} {side} done, load {load_average()}", flush=True)
    print(report(results, args))


def report(results: dict[tuple[str, str], list[dict[str, Any]]], args: Any) -> str:
    lines = [
        f"before {args.before}, after {args.after}; {args.rounds} rounds, trees alternating; "
        f"{args.messages:,} messages of 1 KB (classic), {args.objects:,} objects; "
        f"load at the end {load_average()}",
        "",
        "| contender | before msg/s | after msg/s | after/before | client CPU s/100k before |"
        " after | after/before |",
        "|---|---|---|---|---|---|---|",
    ]
    for kind, name in CLIENTS.items():
        b, a = results.get((kind, "before")), results.get((kind, "after"))
        if not b or not a:
            continue
        rb, ra = median([x["rate"] for x in b]), median([x["rate"] for x in a])
        cb, ca = median([x["cpu100k"] for x in b]), median([x["cpu100k"] for x in a])
        lines.append(
            f"| {name} | {rb:,.0f} | {ra:,.0f} | {ra / rb:.2f}x | {cb:.2f} | {ca:.2f} | {ca / cb:.2f}x |"
        )
    lines += ["", "| CLI process | before s | after s | after/before |", "|---|---|---|---|"]
    for kind in ("apply", "plan"):
        b, a = results.get((kind, "before")), results.get((kind, "after"))
        if not b or not a:
            continue
        sb, sa = median([x["seconds"] for x in b]), median([x["seconds"] for x in a])
        lines.append(f"| rabbitry {kind} | {sb:.2f} | {sa:.2f} | {sa / sb:.2f}x |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
