"""`dispatcher --help` reads as a map: every command, subcommand and flag says what it does."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator

import pytest

from dispatcher.cli.help import ENDPOINT_FLAGS
from dispatcher.cli.main import build_parser
from dispatcher.core.models import EndpointSettings


def _parsers(
    parser: argparse.ArgumentParser, path: str = "dispatcher"
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            for name, sub in action.choices.items():
                assert helps.get(name), f"{path} {name} has no help"
                yield from _parsers(sub, f"{path} {name}")


def test_every_command_and_flag_has_help() -> None:
    seen = []
    for path, parser in _parsers(build_parser()):
        seen.append(path)
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                continue
            assert action.help and action.help != argparse.SUPPRESS, (path, action.dest)
    for expected in ("endpoint delete", "db status", "db url", "db stop", "dlq replay",
                     "dlq list", "delivery list", "delivery show"):  # fmt: skip
        expected = f"dispatcher {expected}"
        assert expected in seen


def test_top_level_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for command in ("migrate", "endpoint", "enqueue", "run", "serve", "alerts", "health",
                    "slow", "dlq", "delivery", "db", "demo", "bench"):  # fmt: skip
        assert re.search(rf"^\s+{command}\s+\S", out, re.M), command
    assert "DATABASE_URL" in out


@pytest.mark.parametrize(("flag", "kind", "text"), ENDPOINT_FLAGS)
def test_endpoint_flag_defaults_are_the_real_ones(flag: str, kind: type, text: str) -> None:
    m = re.search(r"default: ([0-9.]+)\)", text)
    if m is None:
        return
    default = getattr(EndpointSettings(), flag.removeprefix("--").replace("-", "_"))
    assert kind(m.group(1)) == default
