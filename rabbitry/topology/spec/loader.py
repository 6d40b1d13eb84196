"""Reading a spec file: Jinja2 template -> YAML with line marks -> the pydantic ``Spec``.

Every failure is a ``SpecError`` whose problems carry file:line:column and the spec path.
Positions are found in the rendered text (what YAML parsed) and mapped back to the template
source: exact when rendering keeps the line structure (substitutions inside a line), the most
similar source line when loops or includes add lines. The loaded ``Spec`` keeps its source map,
so ``validate(spec)`` reports positions too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import yaml
from pydantic import ValidationError

from rabbitry.errors import SpecError, SpecProblem
from rabbitry.topology.spec.limits import SpecLimits, exceeded
from rabbitry.topology.spec.line_map import LineMap
from rabbitry.topology.spec.model import Spec
from rabbitry.topology.spec.problems import problems_from_validation_error
from rabbitry.topology.spec.source_map import Mark, SourceMap, YamlText, load_yaml
from rabbitry.topology.spec.template import TemplateInputs, render_template, render_with_lines

__all__ = [
    "load_spec",
    "load_spec_text",
    "parse_spec",
    "read_spec",
    "render_spec_file",
    "render_template",
]


def load_spec(
    path: Path,
    variables: Mapping[str, str] | None = None,
    var_files: Sequence[Path] = (),
    environ: Mapping[str, str] | None = None,
    *,
    on_rendered: Callable[[str], None] | None = None,
) -> Spec:
    """Load the spec at ``path``; ``{% include %}`` resolves next to it.

    ``variables`` (``--var``) win over ``var_files`` (later files win); ``environ`` defaults
    to ``os.environ`` and is what templates see as ``env``. ``on_rendered`` is called with
    the rendered text before it is parsed.
    """
    path = Path(path)
    return load_spec_text(
        read_spec(path),
        str(path),
        variables,
        var_files,
        environ,
        search_path=path.parent,
        on_rendered=on_rendered,
    )


def render_spec_file(
    path: Path,
    variables: Mapping[str, str] | None = None,
    var_files: Sequence[Path] = (),
    environ: Mapping[str, str] | None = None,
) -> str:
    """The text of the spec at ``path`` after template rendering (``render --template-only``)."""
    path = Path(path)
    return render_template(
        read_spec(path), str(path), variables, var_files, environ, search_path=path.parent
    )


def read_spec(path: Path, limits: SpecLimits | None = None) -> str:
    """The spec's text; unreadable or oversized files are SpecErrors naming the file."""
    limits = limits or SpecLimits.from_environment()
    try:
        size = path.stat().st_size
        if size > limits.max_bytes:
            raise exceeded("max_bytes", size, limits.max_bytes, "the spec's size", str(path))
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError(SpecProblem(f"cannot read spec: {exc.strerror}", file=str(path))) from None
    except UnicodeDecodeError:
        raise SpecError(SpecProblem("the spec is not UTF-8 text", file=str(path))) from None


def load_spec_text(
    text: str,
    filename: str = "<spec>",
    variables: Mapping[str, str] | None = None,
    var_files: Sequence[Path] = (),
    environ: Mapping[str, str] | None = None,
    *,
    search_path: Path | None = None,
    on_rendered: Callable[[str], None] | None = None,
) -> Spec:
    """Load a spec from its text; ``filename`` is what problems name as the file."""
    inputs = TemplateInputs(variables, var_files, environ, search_path)
    rendered = render_with_lines(text, filename, inputs)
    if on_rendered is not None:
        on_rendered(rendered.text)
    return parse_spec(rendered.text, filename, lines=rendered.lines)


def parse_spec(rendered: str, filename: str = "<spec>", *, lines: LineMap | None = None) -> Spec:
    """Parse already-rendered YAML; ``lines`` maps its positions back to the template."""
    lines = lines or LineMap.identity(filename, rendered)
    try:
        document = load_yaml(
            YamlText(rendered, filename, lines.translate, SpecLimits.from_environment())
        )
    except yaml.MarkedYAMLError as exc:
        raise SpecError(_yaml_problem(exc, filename, lines)) from None
    except yaml.reader.ReaderError as exc:  # a character YAML does not allow (ESC, form feed)
        where = _reader_position(rendered, exc.position, lines)
        raise SpecError(
            SpecProblem(
                f"invalid YAML: character {_character(exc.character)} is not allowed in YAML"
                " text: remove it, or write it as an escape (\\x1b) in a double-quoted string",
                file=(where.file if where else None) or filename,
                line=where.line if where else None,
                column=where.column if where else None,
            )
        ) from None
    except yaml.YAMLError as exc:
        raise SpecError(SpecProblem(f"invalid YAML: {exc}", file=filename)) from None
    if document.problems:
        raise SpecError(document.problems)
    data = document.data
    if data is None:
        raise SpecError(SpecProblem("the spec is empty: start with `version: 1`", file=filename))
    if not isinstance(data, dict):
        raise SpecError(
            SpecProblem("a spec is a mapping (version:, name:, vhosts: ...)", file=filename, line=1)
        )
    return _validate_model(data, document.source)


def _validate_model(data: dict[str, object], source: SourceMap) -> Spec:
    try:
        spec = Spec.model_validate(data)
    except ValidationError as exc:
        raise SpecError(problems_from_validation_error(exc, Spec, source)) from None
    spec._source = source
    return spec


_CONTROL_NAMES = {0: "NUL", 8: "backspace", 12: "form feed", 27: "escape", 127: "delete"}


def _character(character: int | str) -> str:
    code = character if isinstance(character, int) else ord(character)
    name = _CONTROL_NAMES.get(code, "a control character" if code < 32 else None)
    return f"U+{code:04X}" + (f" ({name})" if name else "")


def _reader_position(text: str, position: int, lines: LineMap) -> Mark | None:
    before = text[:position]
    line = before.count("\n")
    return lines.translate(line, position - (before.rfind("\n") + 1))


def _yaml_problem(exc: yaml.MarkedYAMLError, filename: str, lines: LineMap) -> SpecProblem:
    mark = exc.problem_mark or exc.context_mark
    where = lines.translate(mark.line, mark.column) if mark is not None else None
    what = exc.problem or "invalid YAML"
    context = f" ({exc.context})" if exc.context else ""
    return SpecProblem(
        f"invalid YAML: {what}{context}",
        file=(where.file if where else None) or filename,
        line=where.line if where else None,
        column=where.column if where else None,
    )
