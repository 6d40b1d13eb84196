"""A checked spec and the broker it is meant for: where plan, apply, status and shards start.

The broker comes from the arguments, then ``RABBITRY_URL`` / ``RABBITRY_MANAGEMENT_URL``, then
the spec's ``broker:`` section, then localhost. Light on purpose (no HTTP client): commands
that only need the spec import it too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rabbitry.errors import SpecError, SpecProblem
from rabbitry.gcpause import pauses_collector
from rabbitry.management.endpoints import Endpoints, resolve_endpoints
from rabbitry.provisioner.early import definitions_in
from rabbitry.topology import check_spec, expand, load_spec, log_warning
from rabbitry.topology.primitives import Topology
from rabbitry.topology.spec.model import Spec
from rabbitry.topology.versions import Version, parse_version

if TYPE_CHECKING:
    from rabbitry.provisioner.lock import StackLock
    from rabbitry.provisioner.read_ahead import ReadAhead


class Target:
    """A loaded, checked spec and the broker it is meant for."""

    def __init__(
        self, spec: Spec, endpoints: Endpoints, client: Any = None, lock: StackLock | None = None
    ) -> None:
        self._spec: Spec | None = spec
        self.endpoints = endpoints
        self.client = client
        """A management client already reading the spec's vhosts (``target_of(ahead=)``), for
        the caller to use and close; None otherwise."""
        self.lock = lock
        """The stack's lock, claimed while the spec loaded (``target_of(ahead=)`` of an apply),
        over ``client``: the caller acquires it before it applies, or abandons it."""

    def __repr__(self) -> str:
        return f"Target({self.endpoints!r})"

    @property
    def spec(self) -> Spec:
        if self._spec is None:
            raise RuntimeError("this Target's spec was released by topology_alone()")
        return self._spec

    @cached_property
    def topology(self) -> Topology:
        return expand(self.spec)

    def topology_alone(self) -> Topology:
        """The expanded topology, and the spec model let go: for a command that needs nothing
        else of the spec while it reads a broker (the models of 50,000 objects take tens of MB)."""
        topology = self.topology
        self._spec = None
        return topology


def load_spec_or_definitions(
    path: Path,
    variables: Mapping[str, str] | None = None,
    var_files: Sequence[Path] = (),
    *,
    on_rendered: Callable[[str], None] | None = None,
    on_warning: Callable[[SpecProblem], None] | None = None,
    target_version: Callable[[], Version | None] | None = None,
) -> Spec:
    """The spec at ``path``, or the spec ``import-definitions`` would make of the definitions
    file at ``path``: plan and apply take a team's ``definitions.json`` as it is, judged
    against the broker they apply it to (``target_version``, asked only when its version
    decides something) rather than the version that wrote the file."""
    path = Path(path)
    data = definitions_in(path)
    if data is None:
        return load_spec(path, variables, var_files, on_rendered=on_rendered)
    if variables or var_files:
        raise SpecError(
            SpecProblem(
                "a definitions file is not a template: --var and --var-file do not apply to it",
                file=str(path),
            )
        )
    from rabbitry.provisioner.definitions import spec_of_definitions

    return spec_of_definitions(path, data, on_warning or log_warning, target_version)


@pauses_collector
def target_of(
    spec: str | Path | Spec,
    *,
    url: str | None = None,
    management_url: str | None = None,
    variables: Mapping[str, str] | None = None,
    var_files: Sequence[Path] = (),
    on_warning: Callable[[SpecProblem], None] | None = None,
    ca_file: str | None = None,
    insecure: bool | None = None,
    ahead: ReadAhead | None = None,
) -> Target:
    """Load (a path, with template ``variables`` and ``var_files``) and check ``spec``;
    resolve its broker (``ca_file`` / ``insecure``: how to trust the management API's TLS
    certificate). Warnings go to ``on_warning`` (default: the topology logger).

    With ``ahead``, the broker's objects in the spec's vhosts are read while the spec is
    checked, after the stack's lock was claimed for an apply (``ReadAhead``: what it started
    before the spec loaded, on the names it guessed, is let go where the spec names others);
    the ``Target`` takes its ``client`` and ``lock``, and ``ahead`` is closed on failure."""

    def broker_version() -> Version | None:
        # the broker a definitions file is applied to (the spec made of it names none)
        if ahead is not None and ahead.client is not None:
            overview = ahead.client.overview()
        else:
            early = resolve_endpoints(url, management_url, ca_file=ca_file, insecure=insecure)
            with early.management() as asked:
                overview = asked.overview()
        return parse_version(str(overview.get("rabbitmq_version", ""))) or None

    try:
        if isinstance(spec, Spec):
            model = spec
        else:
            model = load_spec_or_definitions(
                Path(spec),
                variables,
                var_files,
                on_rendered=ahead.on_rendered if ahead is not None else None,
                on_warning=on_warning,
                target_version=broker_version,
            )
        broker = model.broker
        endpoints = resolve_endpoints(
            url,
            management_url,
            spec_url=broker.url if broker else None,
            spec_management_url=broker.management_url if broker else None,
            ca_file=ca_file,
            insecure=insecure,
        )
        if ahead is not None:
            ahead.start(model.name, [vhost.name for vhost in model.vhosts], endpoints)
        check_spec(model, on_warning)
    except BaseException:
        if ahead is not None:
            ahead.close()
        raise
    if ahead is None:
        return Target(model, endpoints)
    return Target(model, endpoints, ahead.client, ahead.lock)
