"""A mistake typed at the CLI is named as such, in one line, with exit 2
(issue 37, item 8): a mistyped option before the required one it hides,
with the nearest real one; a mistyped command likewise; a DATABASE_URL
that is not a PostgreSQL URL before any connection is tried."""

from __future__ import annotations

import pytest

from tests.helpers import cli


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["endpoint", "add", "--urll", "http://127.0.0.1:9/x"],
         "unknown option --urll (did you mean --url?)"),
        (["endpoint", "add", "--url", "http://127.0.0.1:9/x", "--max-attemps", "3"],
         "unknown option --max-attemps (did you mean --max-attempts?)"),
        (["endpoint", "add", "--frobnicate"],
         "unknown option --frobnicate (`dispatcher endpoint add --help` lists the options)"),
        (["health", "--jsn"], "unknown option --jsn (did you mean --json?)"),
        (["endpont", "list"],
         "unknown command `dispatcher endpont` (did you mean `dispatcher endpoint`?)"),
        (["endpoint", "lst"],
         "unknown command `dispatcher endpoint lst` (did you mean `dispatcher endpoint list`?)"),
    ],
)  # fmt: skip
async def test_a_mistyped_option_or_command_is_named_first(args: list[str], said: str) -> None:
    code, out, err = await cli("postgresql://127.0.0.1:1/unused", *args)
    assert (code, out, err) == (2, "", f"dispatcher: error: {said}\n")


async def test_abbreviations_argparse_accepts_still_work(db_url: str) -> None:
    code, out, err = await cli(db_url, "endpoint", "add", "--ur", "http://127.0.0.1:9/x", "--js")
    assert code == 0, err
    assert out.startswith("{")


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("notaurl", "DATABASE_URL is not a URL ('notaurl'): expected "
                    "postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE"),
        ("mysql://root:pw@db.example:3306/shop", "DATABASE_URL is not a PostgreSQL URL "
         "(scheme mysql://): expected postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE"),
        ("host=db user=me", "DATABASE_URL is a key=value connection string, not a URL: "
         "expected postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE"),
        ("postgresql://me@[::1/db", "DATABASE_URL is not a valid URL: Invalid IPv6 URL "
         "(expected postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE)"),
    ],
)  # fmt: skip
async def test_a_database_url_that_is_not_postgresql_is_bad_input(url: str, said: str) -> None:
    for args in (["health"], ["run", "--drain"], ["db", "status"]):
        code, out, err = await cli(url, *args)
        assert (code, out, err) == (2, "", f"dispatcher: error: {said}\n"), args
    assert "pw" not in said
