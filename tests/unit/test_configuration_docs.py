"""The configuration page is made from settings.ENVIRONMENT, and that table
names every variable settings.py reads: a new variable without its line,
or a page not regenerated (`make docs`), fails here."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path

from dispatcher import settings

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "operations" / "configuration.md"
DOCUMENTED = {v.name for v in settings.ENVIRONMENT}


class _Recording(Mapping[str, str]):
    """An empty environment that remembers every name asked of it."""

    def __init__(self) -> None:
        self.asked: set[str] = set()

    def __getitem__(self, key: str) -> str:
        self.asked.add(key)
        raise KeyError(key)

    def get(self, key: str, default: object = None) -> object:  # type: ignore[override]
        self.asked.add(key)
        return default

    def __contains__(self, key: object) -> bool:
        self.asked.add(str(key))
        return False

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


def test_every_name_in_settings_source_is_documented() -> None:
    source = Path(settings.__file__).read_text()
    named = set(re.findall(r"\bDISPATCHER_[A-Z0-9_]+\b", source))
    assert named, "the pattern found no DISPATCHER_* name at all"
    assert named - DOCUMENTED == set()


def test_every_name_from_env_reads_is_documented() -> None:
    env = _Recording()
    settings.Settings.from_env(env)
    assert "DISPATCHER_BATCH_SIZE" in env.asked  # the recording works
    assert env.asked - DOCUMENTED == set()


def test_the_table_has_each_name_once_with_a_meaning_and_a_default() -> None:
    names = [v.name for v in settings.ENVIRONMENT]
    assert len(names) == len(set(names))
    for v in settings.ENVIRONMENT:
        assert v.meaning.strip() and v.default.strip(), v.name
        assert "\n" not in v.meaning + v.default, v.name


def test_the_page_is_what_the_table_renders() -> None:
    assert PAGE.read_text() == settings.configuration_page(), (
        "docs/operations/configuration.md is stale: run `make docs`"
    )


def test_the_table_renders_one_row_per_variable() -> None:
    rows = [line for line in settings.markdown_table().splitlines() if line.startswith("| `")]
    assert [r.split("`")[1] for r in rows] == [v.name for v in settings.ENVIRONMENT]
