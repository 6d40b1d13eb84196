"""``SPEC``, its template variables and the broker options, as the commands that work on a
spec's broker take them: one ``SpecSource`` (``plan``, ``apply``, ``reconcile``: the keywords
``rabbitry.plan``, ``rabbitry.apply`` and the ``Reconciler`` take) or one loaded and checked
``Target`` (``status``, ``shards check``)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rabbitry.cli.common import F, broker_arguments, broker_options, parse_vars, spec_options

if TYPE_CHECKING:
    from rabbitry.provisioner.stack import SpecSource

__all__ = ["spec_source_options", "target_options"]


def spec_source_options(func: F) -> F:
    """``SPEC``, ``--var``, ``--var-file`` and the broker options, handed to the command as
    ``spec`` and one ``source``: the template variables parsed, the broker options as
    ``broker_arguments`` leaves them."""

    @functools.wraps(func)
    def command(
        spec: Path, variables: tuple[str, ...], var_files: tuple[Path, ...], **options: Any
    ) -> Any:
        source: SpecSource = {
            "variables": parse_vars(variables),
            "var_files": var_files,
            **broker_arguments(options),  # type: ignore[typeddict-item]
        }
        return func(spec, source, **options)

    return spec_options(broker_options(command))  # type: ignore[return-value]


def target_options(func: F) -> F:
    """``SPEC``, its template variables and the broker options, handed to the command as one
    loaded and checked ``target`` (warnings to stderr)."""

    @functools.wraps(func)
    def command(spec: Path, source: SpecSource, **options: Any) -> Any:
        from rabbitry.cli.reporting import show_warning
        from rabbitry.provisioner.target import target_of  # the spec model loads only here

        target = target_of(spec, on_warning=show_warning, **source)
        return func(target, **options)

    return spec_source_options(command)  # type: ignore[return-value]
