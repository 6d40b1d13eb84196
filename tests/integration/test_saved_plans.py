"""Reviewed plans on a real broker: `plan -o FILE`, `show FILE`, `apply FILE` applies exactly that
plan, and refuses, changing nothing, a plan the broker outran or a file edited by hand; and
`--target`, which applies part of a spec and records nothing of the rest."""

from __future__ import annotations

import json
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pika
import pytest
from click.testing import CliRunner, Result

from rabbitry.cli import cli
from rabbitry.provisioner.lock import lock_name
from rabbitry.provisioner.plan_schema import PlanDocument
from rabbitry.testing.broker import Broker as ContainerBroker
from rabbitry.testing.containers import start_broker
from rabbitry.testing.vhosts import create_test_vhost, delete_vhost

from .conftest import Broker, with_credentials

SPEC = """
version: 1
name: "{{ vars.stack }}"
users:
  - name: "{{ vars.stack }}-app"
    password: "{{ env.APP_PASSWORD }}"
    tags: [monitoring]
vhosts:
  - name: "{{ vars.vhost }}"
    permissions:
      - {user: "{{ vars.stack }}-app"}
    exchanges:
      - {name: orders, type: topic}
    queues:
      - {name: work, type: quorum, arguments: {x-delivery-limit: 5}}
    bindings:
      - {source: orders, destination: work, routing_key: "order.*"}
"""

PASSWORD = "Pl4n-file-pw!"


def apply_file(broker: Broker, planfile: Path, *flags: str) -> Result:
    argv = ["apply", str(planfile), *flags]
    argv += ["--management-url", broker.management_url, "--url", broker.amqp_url]
    return CliRunner().invoke(cli, argv, catch_exceptions=False)


def saved_plan(broker: Broker, body: str = SPEC) -> tuple[Path, Result]:
    planfile = broker.tmp / "stack.plan"
    spec = broker.spec(body)
    result = broker.run("plan", str(spec), "-o", str(planfile), env={"APP_PASSWORD": PASSWORD})
    assert result.exit_code == 0, result.output
    return planfile, result


def state(broker: Broker) -> tuple[set[str], list[object], object]:
    queues = {q["name"]: q["arguments"] for q in broker.get("/queues/{vhost}")}
    return set(queues), sorted(queues.items()), broker.get(f"/users/{broker.stack}-app")


@pytest.mark.versions
def test_apply_of_a_saved_plan_makes_what_it_shows_and_no_password_is_in_the_file(
    broker: Broker,
) -> None:
    planfile, planned = saved_plan(broker)
    assert "Saved the plan to" in planned.output
    assert stat.S_IMODE(planfile.stat().st_mode) == 0o600
    assert PASSWORD not in planfile.read_text()
    assert broker.get("/queues/{vhost}/work") is None, "plan changes nothing"

    shown = CliRunner().invoke(cli, ["show", str(planfile)], catch_exceptions=False)
    assert shown.exit_code == 0, shown.output
    assert "+ queue" in shown.output and "Plan: " in shown.output
    as_json = json.loads(
        CliRunner().invoke(cli, ["show", str(planfile), "--json"], catch_exceptions=False).output
    )
    assert as_json["format_version"] == 1 and as_json["stack"] == broker.stack
    PlanDocument.model_validate(as_json)  # docs/plan.schema.json describes it
    creates = {c["title"] for c in as_json["changes"] if c["action"] == "create"}
    assert f"queue {broker.vhost}/work" in creates

    applied = apply_file(broker, planfile)  # no --auto-approve: a saved plan was reviewed
    assert applied.exit_code == 0, applied.output
    assert "Apply complete" in applied.output
    assert broker.get("/queues/{vhost}/work")["arguments"]["x-delivery-limit"] == 5
    # the user made from the plan's hash logs in with the password from the spec's environment
    params = pika.URLParameters(broker.vhost_amqp_url)
    params.credentials = pika.PlainCredentials(f"{broker.stack}-app", PASSWORD)
    pika.BlockingConnection(params).close()

    again = apply_file(broker, planfile)
    assert again.exit_code == 1
    assert "applied since the plan was made" in again.output
    assert "nothing was applied" in again.output


@pytest.mark.versions
@pytest.mark.parametrize("outran", ["changed", "vanished", "appeared"])
def test_a_plan_the_broker_outran_is_refused_and_changes_nothing(
    broker: Broker, outran: str
) -> None:
    if outran == "appeared":
        planfile, _ = saved_plan(broker)
        broker.http.put(
            f"/queues/{broker.vhost}/work",
            json={"durable": True, "arguments": {"x-queue-type": "quorum"}},
        ).raise_for_status()
    else:
        old = SPEC.replace("x-delivery-limit: 5", "x-delivery-limit: 3")
        assert (
            broker.run(
                "apply", str(broker.spec(old)), "--auto-approve", env={"APP_PASSWORD": PASSWORD}
            ).exit_code
            == 0
        )
        planfile, _ = saved_plan(broker)
        if outran == "changed":  # someone replaced the queue by hand
            broker.http.delete(f"/queues/{broker.vhost}/work").raise_for_status()
            broker.http.put(
                f"/queues/{broker.vhost}/work",
                json={"durable": True, "arguments": {"x-queue-type": "quorum"}},
            ).raise_for_status()
        else:
            broker.http.delete(f"/queues/{broker.vhost}/work").raise_for_status()
    before = state(broker)
    refused = apply_file(broker, planfile, "--allow-replace")
    assert refused.exit_code == 1, refused.output
    assert f"queue {broker.vhost}/work {outran} since the plan was made" in refused.output
    assert "make a new plan" in refused.output
    assert state(broker) == before


def test_an_edited_plan_file_is_refused_and_changes_nothing(broker: Broker) -> None:
    planfile, _ = saved_plan(broker)
    data = json.loads(planfile.read_text())
    for change in data["changes"]:
        if change["key"][0] == "queue":
            change["desired"]["arguments"]["x-delivery-limit"] = 50
    planfile.write_text(json.dumps(data))
    refused = apply_file(broker, planfile)
    assert refused.exit_code == 1
    assert "changed after it was saved" in refused.output
    assert broker.get("/queues/{vhost}/work") is None

    spec_vars = CliRunner().invoke(
        cli, ["apply", str(planfile), "--var", "a=b"], catch_exceptions=False
    )
    assert spec_vars.exit_code == 1 and "saved plan" in spec_vars.output


def test_a_targeted_apply_makes_only_its_objects_and_the_next_plan_the_rest(
    broker: Broker,
) -> None:
    spec = str(broker.spec(SPEC))
    env = {"APP_PASSWORD": PASSWORD}
    work = f"queue/{broker.vhost}/work"
    applied = broker.run("apply", spec, "--auto-approve", "--target", work, env=env)
    assert applied.exit_code == 0, applied.output
    assert "--target leaves the rest of the spec as it is" in applied.output
    assert broker.queue_names() == {"work"}
    assert broker.get("/exchanges/{vhost}/orders") is None
    assert broker.get(f"/users/{broker.stack}-app") is None

    rest = json.loads(broker.run("plan", spec, "--json", env=env).output)
    PlanDocument.model_validate(rest)
    planned = {(c["action"], c["kind"]) for c in rest["changes"]}
    assert ("create", "exchange") in planned and ("create", "binding") in planned
    assert ("create", "user") in planned
    assert not any(c["kind"] == "queue" for c in rest["changes"]), "work is done and recorded"
    assert not any(c["drift"] for c in rest["changes"]), "left-out objects are not drift"

    # a saved plan keeps its targets: applying it makes the binding and what it needs only
    planfile = broker.tmp / "bind.plan"
    made = broker.run(
        "plan", spec, "-o", str(planfile), "--target", f"binding/{broker.vhost}/orders", env=env
    )
    assert made.exit_code == 0, made.output
    assert apply_file(broker, planfile).exit_code == 0
    assert broker.get("/exchanges/{vhost}/orders") is not None
    assert broker.get(f"/users/{broker.stack}-app") is None
    typo = broker.run("plan", spec, "--target", f"queue/{broker.vhost}/wrok", env=env)
    assert typo.exit_code == 1 and "names nothing in the spec or on the broker" in typo.output


def test_apply_never_demotes_or_deletes_the_user_it_is_connected_as(broker: Broker) -> None:
    ops = f"{broker.stack}-ops"
    broker.http.put(f"/users/{ops}", json={"password": "0ps-pw", "tags": "administrator"})
    broker.http.put(
        f"/permissions/{broker.vhost}/{ops}", json={"configure": ".*", "write": ".*", "read": ".*"}
    )
    as_ops = with_credentials(broker.management_url, ops, "0ps-pw")
    try:
        spec = broker.spec(
            """
            version: 1
            name: "{{ vars.stack }}"
            users:
              - {name: "{{ vars.stack }}-ops", tags: [management]}
            vhosts:
              - name: "{{ vars.vhost }}"
            """
        )
        argv = ["--management-url", as_ops, "--url", broker.amqp_url]
        argv += ["--var", f"vhost={broker.vhost}", "--var", f"stack={broker.stack}"]
        planned = CliRunner().invoke(cli, ["plan", str(spec), *argv], catch_exceptions=False)
        assert "apply will refuse: it takes the administrator tag from user" in planned.output
        refused = CliRunner().invoke(
            cli, ["apply", str(spec), "--auto-approve", *argv], catch_exceptions=False
        )
        assert refused.exit_code == 1, refused.output
        assert "the user this apply is connected as" in refused.output
        assert broker.get(f"/users/{ops}")["tags"] == ["administrator"]
        # the same change made as another administrator goes through
        assert broker.run("apply", str(spec), "--auto-approve").exit_code == 0
        assert broker.get(f"/users/{ops}")["tags"] == ["management"]
    finally:
        broker.http.delete(f"/users/{ops}")


@pytest.fixture(scope="module")
def other_broker() -> Iterator[ContainerBroker]:
    """A second broker: another cluster, as production is to staging."""
    with start_broker() as container:
        yield container.broker


@pytest.mark.versions
def test_a_plan_is_refused_on_another_broker_that_shares_its_cluster_name(
    broker: Broker, other_broker: ContainerBroker, tmp_path: Path
) -> None:
    # staging and production made from one chart share the default cluster name
    name = broker.get("/cluster-name")["name"]
    other = Broker(create_test_vhost(other_broker, broker.vhost), tmp_path)
    try:
        other.http.put("/cluster-name", json={"name": name}).raise_for_status()
        planfile, _ = saved_plan(broker)
        made_on = broker.get("/global-parameters/internal_cluster_id")["value"]
        elsewhere = other.get("/global-parameters/internal_cluster_id")["value"]
        # an apply running there: the plan is refused before its lock would be written there
        running = {"token": "t", "holder": "ops@prod (pid 1)", "since": time.time(),
                   "expires": time.time() + 600, "ttl": 600}  # fmt: skip
        lock = f"/global-parameters/{lock_name(broker.stack)}"
        other.http.put(lock, json={"name": lock_name(broker.stack), "value": running})
        refused = apply_file(other, planfile)
        assert refused.exit_code == 1, refused.output
        assert "nothing was applied" in refused.output
        assert f"the plan was made against cluster {made_on} ({name}) at" in refused.output
        assert f"this broker is cluster {elsewhere} ({name}) at" in refused.output
        assert urlsplit(other.management_url).port is not None
        assert f":{urlsplit(other.management_url).port}" in refused.output
        password = urlsplit(broker.management_url).password
        assert password and password not in refused.output
        assert other.get("/queues/{vhost}") == [], "nothing was made there"
        assert other.get(f"/users/{broker.stack}-app") is None
        assert other.get(lock)["value"]["token"] == "t", "the lock there was not touched"
    finally:
        other.http.delete(f"/global-parameters/{lock_name(broker.stack)}")
        delete_vhost(other_broker, broker.vhost)


FEDERATED = """
version: 1
name: "{{ vars.stack }}"
vhosts:
  - name: "{{ vars.vhost }}"
    federation:
      upstreams:
        - name: dc2
          uri: amqp://federator@dc2.invalid:5672/%2F
          password: "{{ env.FED_PASSWORD }}"
"""


@pytest.mark.versions
def test_a_plan_file_holds_no_secret_the_broker_holds_and_apply_sends_the_new_one(
    broker: Broker,
) -> None:
    spec = str(broker.spec(FEDERATED))
    old, new = "0ld-upstream-pw", "N3w-upstream-pw"
    applied = broker.run("apply", spec, "--auto-approve", env={"FED_PASSWORD": old})
    assert applied.exit_code == 0, applied.output
    planfile = broker.tmp / "rotate.plan"
    made = broker.run("plan", spec, "-o", str(planfile), env={"FED_PASSWORD": new})
    assert made.exit_code == 0, made.output
    text = planfile.read_text()
    assert old not in text, "the password the broker holds now"
    assert new in text, "apply sends the spec's new password"

    assert apply_file(broker, planfile).exit_code == 0
    upstream = broker.get("/parameters/federation-upstream/{vhost}/dc2")
    assert f"federator:{new}@dc2.invalid" in upstream["value"]["uri"]

    # a password changed on the broker after the plan is seen, though the file never held it
    planfile = broker.tmp / "again.plan"
    made = broker.run("plan", spec, "-o", str(planfile), env={"FED_PASSWORD": old})
    assert made.exit_code == 0, made.output
    by_hand = {**upstream["value"], "uri": "amqp://federator:by-hand@dc2.invalid:5672/%2F"}
    broker.http.put(
        f"/parameters/federation-upstream/{broker.vhost}/dc2",
        json={"component": "federation-upstream", "vhost": broker.vhost, "name": "dc2",
              "value": by_hand},
    ).raise_for_status()  # fmt: skip
    refused = apply_file(broker, planfile)
    assert refused.exit_code == 1, refused.output
    assert "changed since the plan was made" in refused.output
    assert "by-hand" not in refused.output


def test_the_library_saves_a_plan_applies_exactly_it_and_reports_as_it_goes(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What `plan -o` and `apply PLANFILE --json` do, from Python: the functions the CLI calls."""
    import rabbitry
    from rabbitry.provisioner.plans import Plan

    class Recorder(rabbitry.Reporter):
        def __init__(self) -> None:
            self.seen: list[str] = []

        def planned(self, plan: Plan, broker_url: str) -> None:
            assert secret not in broker_url and "***" in broker_url, "the password is masked"
            self.seen.append(f"planned {plan.summary()}")

        def confirm(self, plan: Plan) -> bool:
            self.seen.append("asked")
            return True

        def progress(self, line: str) -> None:
            self.seen.append(line)

    secret = str(urlsplit(broker.management_url).password)
    monkeypatch.setenv("APP_PASSWORD", PASSWORD)
    where = {"url": broker.amqp_url, "management_url": broker.management_url}
    variables = {"vhost": broker.vhost, "stack": broker.stack}
    planfile = broker.tmp / "library.plan"
    spec = broker.spec(SPEC)
    made = rabbitry.plan(spec, variables=variables, save_to=planfile, **where)
    assert stat.S_IMODE(planfile.stat().st_mode) == 0o600
    with pytest.raises(rabbitry.PlanError, match="saved plan"):
        rabbitry.apply(planfile, variables=variables, **where)

    report = Recorder()
    result = rabbitry.apply(planfile, report=report, **where)
    assert result.plan is not None
    assert [(c.action, c.key) for c in result.plan.changes] == [
        (c.action, c.key) for c in made.changes
    ]
    assert report.seen[0] == f"planned {made.summary()}"
    assert "asked" not in report.seen, "a saved plan was reviewed: nobody is asked"
    out = result.to_json()
    assert out["format_version"] == 1 and out["done"] == result.done and result.done
    assert out["plan"]["changes"] == made.to_json()["changes"]
    assert broker.queue_names() == {"work"}

    # a spec against the broker that now matches it: planned, nothing to ask or do
    report = Recorder()
    again = rabbitry.apply(spec, variables=variables, report=report, **where)
    assert again.plan is not None and not again.plan.has_changes and not again.done
    assert report.seen == ["planned No changes. The broker matches the spec."]
