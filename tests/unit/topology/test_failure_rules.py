"""The failure-path keys of `retry` (`retry_on`, `immediate`, `faults`): what they resolve to,
what they declare, and the problems a bad value gets."""

from __future__ import annotations

from rabbitry.policies.retry import ImmediateRetry
from rabbitry.topology import expand
from rabbitry.topology.patterns.retries import queue_retry
from rabbitry.topology.primitives import ExchangeType

from .conftest import check, load, load_problems, one_problem, vhost_spec

FAILURES = """
queues:
  - name: orders
    retry:
      attempts: 3
      backoff: [1s]
      retry_on: [ConnectionError, myapp.errors.Transient]
      never_retry: [ValueError]
      immediate: {attempts: 4, pause: 20ms}
      faults: {exchange: orders.faults}
  - name: mail
    retry: {attempts: 2, faults: {exchange: orders.faults}}
"""


def test_the_retry_rules_resolve_for_the_worker() -> None:
    spec = load(vhost_spec(FAILURES))
    vhost = spec.vhosts[0]
    retry = queue_retry(vhost, vhost.queues[0])
    assert retry is not None
    assert retry.policy.retry_on == ("ConnectionError", "myapp.errors.Transient")
    assert retry.policy.never_retry == ("ValueError",)
    assert retry.policy.immediate == ImmediateRetry(attempts=4, pause_ms=20)
    assert retry.fault_exchange == "orders.faults"


def test_the_fault_exchange_is_declared_once_as_a_topic_exchange() -> None:
    vhost = expand(load(vhost_spec(FAILURES))).vhosts[0]
    faults = [e for e in vhost.exchanges if e.name == "orders.faults"]
    assert len(faults) == 1 and faults[0].type is ExchangeType.TOPIC and faults[0].durable


def test_a_fault_exchange_the_spec_declares_is_kept_as_declared() -> None:
    body = FAILURES + "exchanges: [{name: orders.faults, type: fanout}]\n"
    vhost = expand(load(vhost_spec(body))).vhosts[0]
    faults = [e for e in vhost.exchanges if e.name == "orders.faults"]
    assert len(faults) == 1 and faults[0].type is ExchangeType.FANOUT


def test_a_headers_fault_exchange_is_refused() -> None:
    body = FAILURES + "exchanges: [{name: orders.faults, type: headers}]\n"
    problems = [p for p in check(vhost_spec(body)) if "fault exchange" in p.message]
    assert len(problems) == 2  # both queues name it
    assert "declare it topic, direct or fanout" in problems[0].message
    assert problems[0].path.endswith("queues[0].retry.faults.exchange"), problems[0].path


def test_an_amq_fault_exchange_is_refused() -> None:
    body = "queues: [{name: q, retry: {faults: {exchange: amq.topic}}}]\n"
    problems = check(vhost_spec(body))
    assert any("amq.* names are the broker's" in p.message for p in problems)


def test_a_name_that_is_no_exception_class_is_refused_where_it_is() -> None:
    problem = one_problem(vhost_spec("queues: [{name: q, retry: {retry_on: [not a class]}}]\n"))
    assert "is not an exception class name" in problem.message
    assert "retry_on" in problem.path


def test_a_name_in_both_lists_is_refused() -> None:
    body = "queues: [{name: q, retry: {retry_on: [KeyError], never_retry: [KeyError]}}]\n"
    problem = one_problem(vhost_spec(body))
    assert "KeyError is in both `retry_on` and `never_retry`" in problem.message


def test_immediate_retries_are_bounded() -> None:
    body = "queues: [{name: q, retry: {immediate: {attempts: 0, pause: 2m}}}]\n"
    problems = load_problems(vhost_spec(body))
    assert {p.path.rsplit(".", 1)[-1] for p in problems} == {"attempts", "pause"}
