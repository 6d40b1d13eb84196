"""The CLI starts fast: a command imports only what it needs, and every command is listed."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path

import click
import pytest

from rabbitry.cli import COMMANDS, cli

HEAVY = [
    "httpx",
    "pika",
    "pyspark",
    "rabbitry.publisher",
    "rabbitry.consumer.app",
    "rabbitry.consumer.engine",
    "rabbitry.amqp",
]
"""What no spec command needs (``validate`` stores the spec's worker view, through
``rabbitry.consumer.view``, but loads no worker)."""
EXAMPLE = Path(__file__).parents[2] / "examples" / "shop.yaml"

# one xdist worker runs the module: the two validate tests read one interpreter's modules
pytestmark = pytest.mark.xdist_group("cli-startup")


OTHER_VERBS = [
    "rabbitry.topology.graph",
    "rabbitry.topology.document",
    "rabbitry.topology.spec.schema",
]
"""What ``graph``, ``render`` and ``schema`` use and ``validate`` does not."""


def loaded_after(*argv: str, watched: list[str] | None = None) -> list[str]:
    watched = [*HEAVY, "pydantic"] if watched is None else watched
    code = (
        "import sys\n"
        "from rabbitry.cli import cli\n"
        "try:\n"
        f"    cli.main({list(argv)!r}, standalone_mode=False)\n"
        "except SystemExit:\n"
        "    pass\n"
        f"print([m for m in {watched!r} if m in sys.modules])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return list(eval(out.stdout.strip().splitlines()[-1]))


def test_version_loads_no_model_client_or_http_library() -> None:
    assert loaded_after("--version") == []


@functools.cache  # one interpreter answers both validate tests (on one xdist worker)
def loaded_by_validate() -> frozenset[str]:
    return frozenset(
        loaded_after("validate", str(EXAMPLE), watched=[*HEAVY, "pydantic", *OTHER_VERBS])
    )


def test_validate_loads_the_spec_model_but_no_client_or_http_library() -> None:
    assert sorted(loaded_by_validate() & {*HEAVY, "pydantic"}) == ["pydantic"]


def test_validate_loads_nothing_only_the_other_spec_verbs_use() -> None:
    assert sorted(loaded_by_validate() & set(OTHER_VERBS)) == []


def test_every_listed_command_resolves_under_its_name() -> None:
    ctx = click.Context(cli)
    for name in COMMANDS:
        command = cli.get_command(ctx, name)
        assert command is not None and command.name == name
    assert cli.get_command(ctx, "nonsense") is None


@pytest.mark.parametrize("verb", ["apply", "plan"])
def test_apply_and_plan_load_nothing_heavy_before_they_start_on_the_broker(verb: str) -> None:
    """`apply` claims the stack's lock and `plan` starts its broker reads before the spec model
    loads (the lock settles, the broker lists the vhost, while it does): the command's own
    module must not pull the model in."""
    code = (
        "import sys\n"
        "from rabbitry.cli import cli\n"
        "import click\n"
        f"cli.get_command(click.Context(cli), {verb!r})\n"
        "print(sorted(m for m in sys.modules if m.startswith(('rabbitry.topology', 'pydantic'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def run_leaving(body: str) -> subprocess.CompletedProcess[str]:
    code = "import atexit, sys, threading, time\nfrom rabbitry.cli import leave\n" + body
    buffered = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=buffered
    )


def test_leave_runs_the_exit_handlers_and_flushes_before_it_exits(tmp_path: Path) -> None:
    """The fast exit skips the interpreter's teardown, not what exit owes the user: atexit
    handlers run (coverage, logging, temporary files) and buffered output reaches the pipe."""
    marker = tmp_path / "handled"
    done = run_leaving(
        f"atexit.register(lambda: open({str(marker)!r}, 'w').write('ran'))\n"
        "sys.stdout.write('buffered, no newline')\n"
        "sys.stderr.write('to stderr')\n"
        "leave(3)\n"
        "print('never')\n"
    )
    assert done.returncode == 3
    assert done.stdout == "buffered, no newline"
    assert done.stderr == "to stderr"
    assert marker.read_text() == "ran"


def test_leave_waits_for_a_running_thread_as_the_normal_exit_does(tmp_path: Path) -> None:
    marker = tmp_path / "finished"
    done = run_leaving(
        "def work():\n"
        "    time.sleep(0.3)\n"
        f"    open({str(marker)!r}, 'w').write('finished')\n"
        "threading.Thread(target=work).start()\n"
        "leave(4)\n"
    )
    assert done.returncode == 4
    assert marker.read_text() == "finished"


def test_leave_reports_output_it_could_not_deliver() -> None:
    """A closed stdout (the reader of a pipe gone) is a failed exit, as the interpreter's is."""
    done = run_leaving(
        "import os\n"
        "sys.stdout.write('lost')\n"  # buffered: stdout is a pipe
        "read, write = os.pipe()\n"
        "os.dup2(write, 1)\n"
        "os.close(read)\n"
        "leave(0)\n"
    )
    assert done.returncode == 120


def test_the_console_command_exits_with_its_code_and_output() -> None:
    script = Path(sys.executable).with_name("rabbitry")
    ok = subprocess.run([script, "validate", str(EXAMPLE)], capture_output=True, text=True)
    assert ok.returncode == 0 and "valid" in ok.stdout
    bad = subprocess.run([script, "validate", "/nonexistent.yaml"], capture_output=True, text=True)
    assert bad.returncode == 1 and "does not exist" in bad.stderr


def test_python_dash_m_rabbitry_is_the_command_with_its_exit_codes() -> None:
    ok = subprocess.run(
        [sys.executable, "-m", "rabbitry", "validate", str(EXAMPLE)], capture_output=True, text=True
    )
    assert ok.returncode == 0 and "valid" in ok.stdout, ok.stderr
    bad = subprocess.run(
        [sys.executable, "-m", "rabbitry", "validate", "/nonexistent.yaml"],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 1 and "does not exist" in bad.stderr
    usage = subprocess.run(
        [sys.executable, "-m", "rabbitry", "--help"], capture_output=True, text=True
    )
    assert usage.returncode == 0 and "python -m rabbitry" in usage.stdout


def without_prometheus(*argv: str) -> subprocess.CompletedProcess[str]:
    """The command run where prometheus-client is not installed (the `metrics` extra left out)."""
    code = (
        "import sys; sys.modules['prometheus_client'] = None;"
        f" sys.argv = ['rabbitry', *{list(argv)!r}];"
        " from rabbitry.cli import main; main()"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)


def test_without_the_metrics_extra_serving_metrics_says_what_to_install() -> None:
    for argv in (
        ["reconcile", str(EXAMPLE)],
        ["worker", "run", "no_such_module:app", "--metrics-port", "0"],
    ):
        result = without_prometheus(*argv)
        assert result.returncode == 1, (argv, result.stderr)
        assert "pip install 'rabbitry[metrics]'" in result.stderr, (argv, result.stderr)
        assert "Traceback" not in result.stderr
    # and what serves no metrics runs without it
    assert without_prometheus("validate", str(EXAMPLE)).returncode == 0
