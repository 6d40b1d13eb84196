"""What a plan reads of a broker, and nothing else: the floor under ``rabbitry plan``.

Usage:  python bench/reads_only.py VHOST     (the broker from RABBITRY_MANAGEMENT_URL)

A process that starts, reads what ``rabbitry plan`` reads (``early.PLAN_READS``, the vhost's
exchanges, queues, bindings, policies and parameters, at once, through rabbitry's own
management client) and decodes the answers, then exits: no spec, no conversion, no planning.
``bench/scale.py`` times it as a process beside each plan. Where the broker shares the
client's cores, a plan cannot take less than this.
"""

from __future__ import annotations

import sys

from rabbitry.management.endpoints import resolve_endpoints
from rabbitry.provisioner.early import PLAN_READS


def main() -> int:
    vhost = sys.argv[1]
    with resolve_endpoints(None, None).management() as client:
        client.read_ahead([vhost], paths=PLAN_READS)
        objects = client.vhost_objects(vhost)
        bindings = objects["bindings"]
        read = {kind: len(items) for kind, items in objects.items() if isinstance(items, list)}
        read["bindings"] = len(bindings() if callable(bindings) else bindings)
        for path in PLAN_READS:
            client.get(path)
    print(" ".join(f"{kind}={count}" for kind, count in sorted(read.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
