"""A vhost's deletion protection (`protected_from_deletion`, RabbitMQ 4.0.6+) through apply,
plan and export, on each release: where the broker has it, apply sets and lifts it and the
broker refuses to delete the vhost meanwhile; where it has not (4.0.5, 3.10), apply warns and
later plans do not ask for it again."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from .conftest import Broker, one_vhost_spec

pytestmark = pytest.mark.versions

PROTECTED = one_vhost_spec("        protected_from_deletion: true\n        queues: [{name: q}]\n")
UNPROTECTED = one_vhost_spec("        queues: [{name: q}]\n")


def test_deletion_protection_is_applied_planned_and_exported(broker: Broker) -> None:
    # 4.0.6 on say whether a vhost is protected; older brokers keep no such setting
    keeps_it = "protected_from_deletion" in broker.get("/vhosts/{vhost}")
    path = f"/vhosts/{quote(broker.vhost, safe='')}"
    try:
        applied = broker.run("apply", str(broker.spec(PROTECTED)), "--auto-approve")
        assert applied.exit_code == 0, applied.output
        again = broker.run("plan", str(broker.spec(PROTECTED)), "--detailed-exitcode")
        assert again.exit_code == 0, again.output
        if not keeps_it:
            assert "vhost deletion protection" in applied.output
            assert "takes effect from RabbitMQ 4.0.6" in applied.output
            return
        assert broker.get("/vhosts/{vhost}")["protected_from_deletion"] is True
        refused = broker.http.delete(path)
        assert refused.status_code == 412, refused.text
        exported = broker.run("export", "--vhost", broker.vhost)
        assert exported.exit_code == 0, exported.output
        assert "protected_from_deletion: true" in exported.stdout

        lifted = broker.run("apply", str(broker.spec(UNPROTECTED)), "--auto-approve")
        assert lifted.exit_code == 0, lifted.output
        assert "protected_from_deletion: true -> (unset)" in lifted.output
        assert broker.get("/vhosts/{vhost}")["protected_from_deletion"] is False
    finally:
        # the fixture deletes the vhost after the test: never leave it protected
        if keeps_it:
            broker.http.delete(f"{path}/deletion/protection")
