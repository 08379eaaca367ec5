"""dispatcher/cli/parser.py and core/dburl.py: mistakes named first, with
the nearest real option (issue 37, item 8); and DISPATCHER_HOME's default
(item 1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dispatcher.cli.main import build_parser
from dispatcher.cli.parser import Parser
from dispatcher.core.dburl import check_database_url
from dispatcher.core.errors import BadInput
from dispatcher.settings import Settings, default_home


def _error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as exit:
        build_parser().parse_args(list(argv))
    assert exit.value.code == 2
    return capsys.readouterr().err


def test_an_unknown_option_comes_before_the_required_one_it_hides(
    capsys: pytest.CaptureFixture[str],
) -> None:
    err = _error(capsys, "endpoint", "add", "--urll", "http://x", "--secrett=whsec_x")
    assert err == (
        "dispatcher: error: unknown option --urll (did you mean --url?); "
        "unknown option --secrett (did you mean --secret?)\n"
    )


def test_values_negative_numbers_and_after_double_dash_are_not_options(
    capsys: pytest.CaptureFixture[str],
) -> None:
    p = Parser(prog="dispatcher x")
    p.add_argument("--json", action="store_true")
    p.add_argument("--payload")
    words = ["--json", "--payload", "-", "-5", "-0.5", "--", "--zz"]
    assert p.unknown_options(words) == []
    assert p.unknown_options(["--jsno", "--payload=1", "--jsno", "-q"]) == ["--jsno", "-q"]
    err = _error(capsys, "endpoint", "add", "--url", "u", "--max-attempts", "x")
    assert "invalid int value" in err


def test_argparse_abbreviations_are_known(capsys: pytest.CaptureFixture[str]) -> None:
    args = build_parser().parse_args(["endpoint", "add", "--ur", "http://x", "--js"])
    assert args.url == "http://x" and args.json
    assert "ambiguous option: --max" in _error(
        capsys, "endpoint", "add", "--url", "u", "--max", "3"
    )


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("notaurl", "is not a URL ('notaurl')"),
        ("postgres:s3cret@db", "is not a URL: expected"),  # may hold a password: not quoted
        ("mysql://u:pw@h/d", "is not a PostgreSQL URL (scheme mysql://)"),
        ("host=h dbname=d", "is a key=value connection string"),
        ("postgresql://u@[::1/d", "is not a valid URL: Invalid IPv6 URL"),
    ],
)
def test_database_urls_that_are_not_postgresql(url: str, said: str) -> None:
    with pytest.raises(BadInput, match=r"^DATABASE_URL ") as err:
        Settings.from_env({"DATABASE_URL": url})
    assert said in str(err.value) and "s3cret" not in str(err.value) and "pw" not in str(err.value)


def test_postgresql_urls_pass() -> None:
    for url in ("postgresql://u@h/d", "postgres://u:p@h1:5432,h2:5433/d?sslmode=require",
                "postgresql:///d?host=/run/postgresql"):  # fmt: skip
        check_database_url(url)


def test_the_default_home_is_the_users_data_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", "/home/ann")
    assert default_home({}) == Path("/home/ann/.local/share/dispatcher")
    assert default_home({"XDG_DATA_HOME": "/data/ann"}) == Path("/data/ann/dispatcher")
    assert default_home({"XDG_DATA_HOME": "relative"}) == Path("/home/ann/.local/share/dispatcher")
    assert Settings.from_env({}).home == Path("/home/ann/.local/share/dispatcher")
    assert Settings.from_env({"DISPATCHER_HOME": "./x"}).home == Path("x")


@pytest.mark.parametrize("words", [
    ("endpoint", "disable", "99999999999999999999"),
    ("endpoint", "rotate-secret", "0"),
    ("delivery", "show", "x1"),
    ("dlq", "replay", "--id", "-3"),
])  # fmt: skip
def test_ids_out_of_range_are_one_line_before_the_database(
    capsys: pytest.CaptureFixture[str], words: tuple[str, ...]
) -> None:
    assert "not an id" in _error(capsys, *words)
