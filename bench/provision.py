"""Provisioning speed: rabbitry apply vs the broker's own definitions import vs one call per object.

Usage:  python bench/provision.py [--rounds 3] [--scale 300] [--definitions-scales 300,2000]
        [--management-url URL]
Broker: --management-url, else $RABBITRY_MANAGEMENT_URL, else a dev broker must be running
(`rabbitry dev-broker up`). Every contender creates the same generated topology into its own
empty vhost of the same broker, in the same run; rounds alternate the contenders so that none
always runs on a warmer broker. Reported: median wall time per contender, ratios, and the time of
an unchanged re-plan (spec load + broker read + diff).

Then definitions files (the broker's own export of such a topology at each of
--definitions-scales, with a user and its permissions) are brought onto the broker two ways,
again rotating the order: `rabbitry
import-definitions FILE -o SPEC` then `rabbitry apply SPEC --auto-approve` (two CLI processes,
start-up included), `rabbitry apply FILE --auto-approve` (the file as the spec, one process),
and `POST /api/definitions` of the file.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from results import one_vhost_spec

from rabbitry.management.client import ManagementClient, q
from rabbitry.provisioner.applier import ApplyOptions, apply_plan, definitions_for
from rabbitry.provisioner.planner import plan
from rabbitry.provisioner.state import read_state
from rabbitry.topology import load_topology
from rabbitry.topology.primitives import Topology


def spec_text(vhost: str, scale: int) -> str:
    """A spec with ``scale`` topic exchanges, 2*scale queues (half quorum), 2*scale bindings."""
    exchanges = [{"name": f"ex.{i}", "type": "topic"} for i in range(scale)]
    queues = []
    bindings = []
    for i in range(scale):
        queues.append(
            {"name": f"quorum.{i}", "type": "quorum", "arguments": {"x-delivery-limit": 10}}
        )
        queues.append(
            {"name": f"classic.{i}", "type": "classic", "arguments": {"x-message-ttl": 60000}}
        )
        bindings.append({"source": f"ex.{i}", "destination": f"quorum.{i}", "routing_key": "a.#"})
        bindings.append({"source": f"ex.{i}", "destination": f"classic.{i}", "routing_key": "b.*"})
    policies = [
        {
            "name": f"cap.{i}",
            "pattern": f"^classic\\.{i}$",
            "apply_to": "queues",
            "definition": {"max-length": 100000},
        }
        for i in range(max(1, scale // 15))
    ]
    return one_vhost_spec(
        vhost,
        vhost,
        exchanges=exchanges,
        queues=queues,
        bindings=bindings,
        policies=policies,
    )


def rabbitry_apply(client: ManagementClient, spec: Path) -> Topology:
    topology = load_topology(spec)
    state = read_state(client, topology.name, [v.name for v in topology.vhosts])
    apply_plan(client, plan(topology, state), ApplyOptions())
    return topology


def replan(client: ManagementClient, spec: Path) -> bool:
    topology = load_topology(spec)
    state = read_state(client, topology.name, [v.name for v in topology.vhosts])
    return plan(topology, state).has_changes


def definitions_import(client: ManagementClient, topology: Topology) -> None:
    vhost = topology.vhosts[0]
    client.put(f"/vhosts/{q(vhost.name)}", {})
    client.import_definitions(definitions_for(vhost.members()), vhost.name)


def per_object(client: ManagementClient, topology: Topology) -> None:
    # The applier's one-request-per-object path is exactly "one HTTP call per object".
    from rabbitry.provisioner.applier import Applier
    from rabbitry.provisioner.ownership import OwnershipRecord
    from rabbitry.provisioner.planner import Plan

    vhost = topology.vhosts[0]
    client.put(f"/vhosts/{q(vhost.name)}", {})
    applier = Applier(client, Plan(stack="bench", changes=(), record=OwnershipRecord("bench")))
    for member in vhost.members():
        applier.put(vhost.name, member)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--scale", type=int, default=300)
    parser.add_argument(
        "--definitions-scales",
        default="300,2000",
        help="sizes (--scale units) of the definitions files, comma-separated",
    )
    parser.add_argument("--management-url", default=os.environ.get("RABBITRY_MANAGEMENT_URL"))
    args = parser.parse_args()
    if not args.management_url:
        print(
            "set --management-url or RABBITRY_MANAGEMENT_URL (or eval $(rabbitry dev-broker env))",
            file=sys.stderr,
        )
        return 1

    client = ManagementClient(args.management_url, timeout=120)
    version = client.overview().get("rabbitmq_version")
    results: dict[str, list[float]] = {"rabbitry": [], "import": [], "per_object": [], "replan": []}
    objects = 0
    with tempfile.TemporaryDirectory() as tmp:
        for round_no in range(args.rounds):
            tag = uuid.uuid4().hex[:6]
            names = {k: f"bench-{k}-{tag}" for k in ("rabbitry", "import", "per_object")}
            spec = Path(tmp) / f"spec-{tag}.yaml"
            spec.write_text(spec_text(names["rabbitry"], args.scale))
            reference = load_topology(spec)
            objects = len(reference.resources()) - 1  # the vhost itself is not counted
            others = {k: load_topology_named(spec, names[k]) for k in ("import", "per_object")}
            order = ["rabbitry", "import", "per_object"]
            order = order[round_no % 3 :] + order[: round_no % 3]
            try:
                for contender in order:
                    start = time.perf_counter()
                    if contender == "rabbitry":
                        rabbitry_apply(client, spec)
                    elif contender == "import":
                        definitions_import(client, others["import"])
                    else:
                        per_object(client, others["per_object"])
                    results[contender].append(time.perf_counter() - start)
                start = time.perf_counter()
                changed = replan(client, spec)
                results["replan"].append(time.perf_counter() - start)
                if changed:
                    raise SystemExit("re-plan after apply was not empty: the benchmark is invalid")
            finally:
                for name in names.values():
                    client.delete(f"/vhosts/{q(name)}")
                client.delete(f"/global-parameters/{q('rabbitry.stack.' + names['rabbitry'])}")

    med = {k: statistics.median(v) for k, v in results.items()}
    print(f"RabbitMQ {version}; {objects} objects; {args.rounds} rounds; median seconds\n")
    print("| contender | seconds | vs definitions import |")
    print("|---|---|---|")
    print(
        f"| rabbitry apply (load + read + plan + import + verify + record) | {med['rabbitry']:.2f}"
        f" | {med['rabbitry'] / med['import']:.2f}x |"
    )
    print(f"| POST /api/definitions (broker's own import) | {med['import']:.2f} | 1.00x |")
    print(
        f"| one HTTP call per object | {med['per_object']:.2f}"
        f" | {med['per_object'] / med['import']:.2f}x |"
    )
    print(f"| rabbitry re-plan, no changes (load + read + diff) | {med['replan']:.2f} | - |")
    ok = med["rabbitry"] <= 1.2 * med["import"] and med["replan"] <= 0.5
    print(f"\ntargets: apply <= 1.2x import, re-plan <= 0.5 s: {'met' if ok else 'NOT met'}")
    print()
    for scale in (int(x) for x in args.definitions_scales.split(",")):
        definitions_files(client, args, version, scale)
    return 0


def definitions_file(client: ManagementClient, scale: int, tmp: Path, template: str) -> str:
    """The broker's export of the generated topology in vhost ``template``, with a user and
    its permissions: the kind of file a team keeps in git."""
    spec = tmp / "template.yaml"
    spec.write_text(spec_text(template, scale))
    definitions_import(client, load_topology_named(spec, template))
    user = f"app-{template}"
    client.put(f"/users/{q(user)}", {"password": uuid.uuid4().hex, "tags": "monitoring"})
    client.put(f"/permissions/{q(template)}/{q(user)}", {"configure": "", "write": ".*",
                                                         "read": ".*"})  # fmt: skip
    everything = client.get("/definitions")
    try:
        mine = {
            kind: [x for x in everything.get(kind, []) if x.get("vhost") == template]
            for kind in ("queues", "exchanges", "bindings", "policies", "permissions")
        }
        mine["vhosts"] = [v for v in everything["vhosts"] if v["name"] == template]
        mine["users"] = [u for u in everything["users"] if u["name"] == user]
        return json.dumps({"rabbit_version": everything.get("rabbit_version"), **mine})
    finally:
        client.delete(f"/vhosts/{q(template)}")
        client.delete(f"/users/{q(user)}")


def definitions_files(
    client: ManagementClient, args: argparse.Namespace, version: str, scale: int
) -> None:
    rabbitry = str(Path(sys.executable).parent / "rabbitry")
    env = {**os.environ, "RABBITRY_MANAGEMENT_URL": args.management_url}
    contenders = ["rabbitry", "rabbitry-file", "import"]
    results: dict[str, list[float]] = {k: [] for k in contenders}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        template = f"bench-template-{uuid.uuid4().hex[:6]}"
        text = definitions_file(client, scale, tmp, template)
        objects = sum(len(v) for k, v in json.loads(text).items() if isinstance(v, list))
        for round_no in range(args.rounds):
            tag = uuid.uuid4().hex[:6]
            names = {k: f"bench-defs-{k}-{tag}" for k in contenders}
            shift = round_no % len(contenders)
            order = contenders[shift:] + contenders[:shift]
            try:
                for contender in order:
                    file = tmp / f"{names[contender]}.json"
                    file.write_text(text.replace(template, names[contender]))
                    start = time.perf_counter()
                    if contender.startswith("rabbitry"):
                        spec = tmp / f"{names[contender]}.yaml"
                        steps = (
                            [
                                ["import-definitions", str(file), "-o", str(spec)],
                                ["apply", str(spec), "--auto-approve"],
                            ]
                            if contender == "rabbitry"
                            else [["apply", str(file), "--auto-approve"]]
                        )
                        for argv in steps:
                            done = subprocess.run(
                                [rabbitry, *argv], env=env, capture_output=True, text=True
                            )
                            if done.returncode != 0:
                                raise SystemExit(f"rabbitry {argv[0]} failed:\n{done.stderr}")
                    else:
                        client.import_definitions(json.loads(file.read_text()))
                    results[contender].append(time.perf_counter() - start)
                made = {
                    k: len(client.get(f"/queues/{q(n)}", params={"columns": "name"}))
                    for k, n in names.items()
                }
                if len(set(made.values())) != 1:
                    raise SystemExit(f"the contenders made different vhosts: {made}")
            finally:
                for name in names.values():
                    client.delete(f"/vhosts/{q(name)}")
                    client.delete(f"/users/{q('app-' + name)}")
                    client.delete(f"/global-parameters/{q('rabbitry.stack.' + name)}")

    med = {k: statistics.median(v) for k, v in results.items()}
    print(f"RabbitMQ {version}; a definitions file of {objects} objects; {args.rounds} rounds;")
    print("median seconds\n")
    print("| contender | seconds | vs definitions import |")
    print("|---|---|---|")
    print(
        f"| rabbitry import-definitions + rabbitry apply (two processes) | {med['rabbitry']:.2f}"
        f" | {med['rabbitry'] / med['import']:.2f}x |"
    )
    print(
        f"| rabbitry apply FILE.json (the file as the spec, one process) | {med['rabbitry-file']:.2f}"
        f" | {med['rabbitry-file'] / med['import']:.2f}x |"
    )
    print(f"| POST /api/definitions of the file | {med['import']:.2f} | 1.00x |")
    for key, what in (("rabbitry", "import-definitions + apply"), ("rabbitry-file", "apply FILE")):
        ok = med[key] <= 1.1 * med["import"]
        print(f"target: {what} <= 1.1x import: {'met' if ok else 'NOT met'}")
    print()


def load_topology_named(spec: Path, vhost: str) -> Topology:
    """The reference topology moved to another vhost (same objects, other name)."""
    topology = load_topology(spec)
    moved = topology.vhosts[0].model_copy(update={"name": vhost})
    return topology.model_copy(update={"name": vhost, "vhosts": (moved,)})


if __name__ == "__main__":
    sys.exit(main())
