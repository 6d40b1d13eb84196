"""The Jinja2 sandbox a templated spec renders in, within the spec's limits.

Only a spec with template syntax comes here (``template.render_with_lines`` decides), so
Jinja2 is imported by the specs that use it. The render runs in Jinja2's sandbox with limits on
what one expression may build, a bound on output size and time, and a second, line-marking
render that maps each rendered line back to the template line that wrote it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import signal
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import jinja2
from jinja2 import nodes
from jinja2.sandbox import SandboxedEnvironment

from rabbitry.errors import SpecError, SpecProblem
from rabbitry.topology.spec.limits import SpecLimits, env_name, exceeded, number
from rabbitry.topology.spec.line_map import MARKER, LineMap, Rendered


class EnvironmentVariables(dict[str, str]):
    """``env`` in templates: ``env.NAME`` or ``env['NAME']``."""


class TemplateVariables(dict[str, Any]):
    """``vars`` in templates."""


# Internal: the render turns it into a SpecError of rabbitry.errors; it never reaches a user
# (tests/unit/test_error_tree.py knows it).
class SecretFileUnreadable(Exception):
    """``file(PATH)`` in a template named a file that cannot be read (the render's error)."""


def secret_file_reader(base: Path | None, max_bytes: int) -> Any:
    """``file(PATH)`` in templates: the text of a file (a Kubernetes Secret mounted as one,
    ``/run/secrets/...``), one trailing newline stripped, so ``password: {{ file(...) }}``
    holds the secret and not the newline editors add. A relative PATH is from the spec's
    directory. Read at each render, so a changed file counts from the next ``reconcile`` pass."""

    def read(path: str) -> str:
        where = Path(str(path))
        if not where.is_absolute() and base is not None:
            where = base / where
        try:
            with where.open("rb") as handle:
                data = handle.read(max_bytes + 1)
        except OSError as exc:
            raise SecretFileUnreadable(
                f"file({str(path)!r}): cannot read {str(where)!r}: {exc.strerror}; mount or"
                " create it (a Kubernetes Secret mounted as a volume), or fix the path"
            ) from None
        if len(data) > max_bytes:
            raise SecretFileUnreadable(
                f"file({str(path)!r}) is over {max_bytes} bytes, the spec's size limit"
            )
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise SecretFileUnreadable(f"file({str(path)!r}) is not UTF-8 text") from None
        return text.removesuffix("\n").removesuffix("\r")

    return read


class _SpecUndefined(jinja2.StrictUndefined):
    """StrictUndefined whose message says which variable is missing and how to provide it."""

    @property
    def _undefined_message(self) -> str:
        name = self._undefined_name
        if isinstance(self._undefined_obj, EnvironmentVariables):
            return (
                f"environment variable {name!r} is not set: export it, or give a fallback "
                f"with {{{{ env.{name} | default('...') }}}}"
            )
        if isinstance(self._undefined_obj, TemplateVariables):
            return (
                f"template variable {name!r} is not defined: pass --var {name}=VALUE, put it "
                f"in a --var-file, or give a fallback with {{{{ vars.{name} | default('...') }}}}"
            )
        if self._undefined_hint is None and self._undefined_obj is jinja2.utils.missing:
            return (
                f"{name!r} is undefined: templates know `env`, `vars`, `file(PATH)` and the"
                " variables passed with --var / --var-file"
            )
        return str(super()._undefined_message)


def _loaders(search_path: Path | None, main_name: str, main_text: str) -> jinja2.BaseLoader:
    loaders: list[jinja2.BaseLoader] = [
        jinja2.FunctionLoader(
            lambda name: (main_text, main_name, lambda: True) if name == main_name else None
        )
    ]
    if search_path is not None:
        loaders.append(jinja2.FileSystemLoader(search_path))
    return jinja2.ChoiceLoader(loaders)


_OPTIONS: dict[str, Any] = {
    "undefined": _SpecUndefined,
    "trim_blocks": True,
    "lstrip_blocks": True,
    "keep_trailing_newline": True,
    "autoescape": False,
}


class _LimitedEnvironment(SandboxedEnvironment):
    """The sandbox with limits on what one expression may build (``SpecLimits.max_string``):
    ``*`` and ``**`` are checked before they run, calls and filters by their arguments and
    results. The whole render is bounded by ``render_limited`` (output size and time)."""

    intercepted_binops = frozenset(["*", "**"])

    def __init__(self, limits: SpecLimits, **options: Any) -> None:
        super().__init__(**options)
        self.limits = limits
        self.filters = {name: self._limited(f) for name, f in self.filters.items()}

    def _too_big(self, size: float, what: str) -> SpecError:
        return exceeded("max_string", size, self.limits.max_string, what)

    def _check_size(self, value: Any, what: str) -> Any:
        if isinstance(value, str | bytes | list | tuple) and len(value) > self.limits.max_string:
            raise self._too_big(len(value), what)
        return value

    def _check_arguments(self, args: Sequence[Any], kwargs: Mapping[str, Any], what: str) -> None:
        for value in (*args, *kwargs.values()):
            number = isinstance(value, int) and not isinstance(value, bool)
            if number and abs(value) > self.limits.max_string:
                raise self._too_big(abs(value), f"an argument of {what}")

    def _limited(self, function: Any) -> Any:
        name = getattr(function, "__name__", "a filter").removeprefix("do_")

        @functools.wraps(function)
        def limited(*args: Any, **kwargs: Any) -> Any:
            self._check_arguments(args[1:], kwargs, f"the filter {name!r}")
            if name == "replace" and len(args) >= 3 and isinstance(args[0], str):
                text, old, new = str(args[-3]), str(args[-2]), str(args[-1])
                hits = text.count(old) if old else len(text) + 1
                size = len(text) + hits * len(new)
                if size > self.limits.max_string:
                    raise self._too_big(size, "the result of the filter 'replace'")
            return self._check_size(function(*args, **kwargs), f"the result of {name!r}")

        return limited

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        if operator == "*":
            for seq, times in ((left, right), (right, left)):
                if isinstance(seq, str | bytes | list | tuple) and isinstance(times, int):
                    size = len(seq) * times
                    if size > self.limits.max_string:
                        raise self._too_big(size, "a repeated string or list")
        elif operator == "**" and isinstance(left, int) and isinstance(right, int):
            bits = max(abs(left), 2).bit_length() * right
            if bits > 64 * 1024:
                raise self._too_big(bits, "the bits of a power")
        return super().call_binop(context, operator, left, right)

    def call(self, context: Any, obj: Any, /, *args: Any, **kwargs: Any) -> Any:
        what = f"a call of {getattr(obj, '__name__', 'a function')!r}"
        self._check_arguments(args, kwargs, what)
        result = super().call(context, obj, *args, **kwargs)
        return self._check_size(result, f"the result of {what}")


# Internal: caught in this module, where the render turns it into a SpecError.
class _RenderTimeout(Exception):
    pass


@contextlib.contextmanager
def _deadline(seconds: float) -> Iterator[None]:
    """Interrupt the render after ``seconds`` (a SIGALRM timer: in the main thread only, where
    the CLI runs; elsewhere the size limits still hold)."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(
        signal, "setitimer"
    ):
        yield
        return

    def expire(signum: int, frame: Any) -> None:
        raise _RenderTimeout

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def render_limited(
    template: jinja2.Template, context: Mapping[str, Any], limits: SpecLimits, filename: str
) -> str:
    """Render ``template`` within ``limits``: its output size and its time."""
    parts: list[str] = []
    size = 0
    try:
        with _deadline(limits.max_render_seconds):
            for part in template.generate(context):
                size += len(part)
                if size > limits.max_bytes:
                    raise exceeded(
                        "max_bytes", size, limits.max_bytes, "the rendered spec's size", filename
                    )
                parts.append(part)
    except _RenderTimeout:
        seconds = number(limits.max_render_seconds)
        raise SpecError(
            SpecProblem(
                f"the template did not finish rendering within {seconds} s (a loop that runs"
                " too long?); if it needs longer, raise the limit with"
                f" {env_name('max_render_seconds')}",
                file=filename,
            )
        ) from None
    return "".join(parts)


class _LineMarkingEnvironment(_LimitedEnvironment):
    """Renders like the spec environment, plus markers naming the template and line that every
    piece of literal text was written on: one where each piece starts, one after each newline.

    Markers go into the template's literal text only (``TemplateData`` nodes, after trimming),
    so loops repeat them with the text they mark and includes mark their own lines. The origin
    of a rendered line is the last of the markers it starts with.
    """

    def __init__(self, limits: SpecLimits, **options: Any) -> None:
        super().__init__(limits, **options)
        self.files: list[str] = []
        self.sources: dict[str, tuple[str, ...]] = {}

    def _parse(self, source: str, name: str | None, filename: str | None) -> nodes.Template:
        tree = super()._parse(source, name, filename)
        file_id = len(self.files)
        file = filename or name or "<template>"
        self.files.append(file)
        self.sources[file] = tuple(source.splitlines())
        for data in tree.find_all(nodes.TemplateData):
            lines = data.data.split("\n")
            data.data = "\n".join(
                f"\x00{file_id}:{data.lineno + k}\x00{line}" for k, line in enumerate(lines)
            )
        return tree


def render_jinja(
    text: str,
    filename: str,
    values: dict[str, Any],
    variables: Mapping[str, str] | None,
    environ: Mapping[str, str] | None,
    *,
    search_path: Path | None,
) -> Rendered:
    """Render ``text`` (a template) with the var files' ``values`` and ``variables`` on top;
    every failure is a SpecError at the template line it happened on."""
    values.update(variables or {})
    context: dict[str, Any] = dict(values)
    context["vars"] = TemplateVariables(values)
    context["env"] = EnvironmentVariables(os.environ if environ is None else environ)
    loader = _loaders(search_path, filename, text)
    limits = SpecLimits.from_environment(environ)
    context["file"] = secret_file_reader(search_path, limits.max_bytes)
    env = _LimitedEnvironment(limits, loader=loader, **_OPTIONS)
    try:
        rendered = render_limited(env.get_template(filename), context, limits, filename)
    except SpecError as exc:  # a limit: at the template line that went past it
        where, line = _template_position(exc, filename)
        raise SpecError(
            [p if p.file else dataclasses.replace(p, file=where, line=line) for p in exc.problems]
        ) from None
    except jinja2.TemplateSyntaxError as exc:
        raise SpecError(
            SpecProblem(
                f"template syntax error: {exc.message}",
                file=exc.filename or filename,
                line=exc.lineno,
            )
        ) from None
    except jinja2.TemplateNotFound as exc:
        where, line = _template_position(exc, filename)
        raise SpecError(
            SpecProblem(f"template not found: {exc.name}", file=where, line=line)
        ) from None
    except Exception as exc:  # any failure inside a template is the spec's fault
        where, line = _template_position(exc, filename)
        plain = isinstance(exc, jinja2.UndefinedError | SecretFileUnreadable)
        message = str(exc) if plain else f"template error: {exc}"
        raise SpecError(SpecProblem(message, file=where, line=line)) from None
    return Rendered(rendered, _line_map(loader, filename, text, rendered, context, limits))


def _line_map(
    loader: jinja2.BaseLoader,
    filename: str,
    text: str,
    rendered: str,
    context: dict[str, Any],
    limits: SpecLimits,
) -> LineMap:
    if rendered == text:
        return LineMap.identity(filename, text)
    marking = _LineMarkingEnvironment(limits, loader=loader, **_OPTIONS)
    try:
        # the markers make the text longer than the plain render: room for them
        room = dataclasses.replace(limits, max_bytes=limits.max_bytes * 4)
        marked = render_limited(marking.get_template(filename), context, room, filename)
    except Exception:  # the plain render worked; fall back rather than fail on the markers
        marked = None
    if marked is not None and MARKER.sub("", marked) == rendered:
        return LineMap.from_markers(marked, marking.files, marking.sources, filename)
    # Output that depends on its own text (e.g. `{% set %}` blocks measured with |length).
    return LineMap.from_diff(filename, text, rendered)


def _template_position(exc: BaseException, filename: str) -> tuple[str, int | None]:
    """The innermost template frame of ``exc``'s traceback (Jinja rewrites them to templates)."""
    where, line = filename, None
    tb = exc.__traceback__
    while tb is not None:
        if "__jinja_exception__" in tb.tb_frame.f_globals:
            where, line = tb.tb_frame.f_code.co_filename, tb.tb_lineno
        tb = tb.tb_next
    return where, line
