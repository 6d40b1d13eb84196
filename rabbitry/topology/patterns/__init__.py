"""Spec -> Topology: the expansion of what users wrote into the broker's primitives.

``expand.expand(spec)`` runs the steps of ``expand.VHOST_STEPS`` over a ``draft.VhostDraft``
per vhost: first the declared objects one to one, then each pattern, one module each:
``delays`` (TTL levels), ``retries`` (tier queues, parking lots, dead-lettering),
``sharding`` (consistent-hash and modulus shards), ``federation`` (upstreams and policies);
``queues`` holds the TTL and holding queues the first two share. Pure: no I/O.

A new pattern is a module with a ``declare_<pattern>(draft)`` step appended to ``VHOST_STEPS``,
plus its checks in ``topology.checks``.
"""
