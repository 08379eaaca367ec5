"""The CLI's argument parser: argparse, each error one line on stderr (exit
2), and a mistyped option or command named as such, with the nearest real
one, before anything argparse would say about what is then missing.

argparse puts an option it does not know aside and reports it only after
the command's own parse, which fails first on the required option the typo
was meant to be (`endpoint add --urll …`: "--url is required"). So every
parse records the innermost parser and the words it was given, and an
error looks there for unknown options first.
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from collections.abc import Sequence
from typing import NoReturn

_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")
_INVALID_CHOICE = re.compile(r"invalid choice: '?([^'\s]+)'? \(choose from (.+)\)$")


class Parser(argparse.ArgumentParser):
    # The parser that parsed last and its words: with subcommands, the
    # innermost one (each parse starts after its parent's has).
    _last: tuple[Parser, list[str]] | None = None

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        Parser._last = (self, list(sys.argv[1:] if args is None else args))
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        if message.endswith("required: COMMAND"):
            # `dispatcher` (or `dispatcher endpoint`) alone: someone looking
            # around, who needs the commands more than the complaint.
            sys.stderr.write(self.format_help())
            sys.exit(2)
        # One line, not argparse's usage block.
        sys.stderr.write(f"dispatcher: error: {self.explain(message)}\n")
        sys.exit(2)

    def explain(self, message: str) -> str:
        """argparse's message, or what is really wrong: an unknown option
        (or command), with a suggestion when one is near."""
        parser, words = Parser._last if Parser._last is not None else (self, [])
        unknown = parser.unknown_options(words)
        if not unknown and message.startswith("unrecognized arguments: "):
            unknown = [w for w in message.split(": ", 1)[1].split() if w.startswith("-")]
        if unknown:
            return "; ".join(parser.unknown_option(name) for name in unknown)
        choice = _INVALID_CHOICE.search(message)
        if choice is not None and not message.startswith("argument COMMAND: "):
            # A value out of an option's or argument's choices: argparse's
            # words, which name both, and the nearest choice.
            given = choice.group(1)
            values = [c.strip().strip("'\"") for c in choice.group(2).split(",")]
            near = difflib.get_close_matches(given, values, n=1)
            return message + (f" (did you mean {near[0]!r}?)" if near else "")
        if choice is not None:
            given = choice.group(1)
            commands = [c.strip().strip("'\"") for c in choice.group(2).split(",")]
            near = difflib.get_close_matches(given, commands, n=1)
            hint = f"did you mean `{self.prog} {near[0]}`?" if near else (
                f"`{self.prog} --help` lists the commands"
            )  # fmt: skip
            return f"unknown command `{self.prog} {given}` ({hint})"
        return message

    def option_names(self) -> list[str]:
        return [name for action in self._actions for name in action.option_strings]

    def unknown_options(self, words: Sequence[str]) -> list[str]:
        """The options among `words` this parser does not know (argparse's
        unique-prefix abbreviations count as known)."""
        known = self.option_names()
        out: list[str] = []
        for word in words:
            if word == "--":
                break  # the rest is positional
            if not word.startswith("-") or word == "-" or _NEGATIVE_NUMBER.match(word):
                continue
            name = word.partition("=")[0] if word.startswith("--") else word[:2]
            if name in known or (
                name.startswith("--")
                and self.allow_abbrev
                and any(k.startswith(name) for k in known if k.startswith("--"))
            ):
                continue
            if name not in out:
                out.append(name)
        return out

    def unknown_option(self, name: str) -> str:
        # Compared without their dashes, which every option shares.
        names = {o.lstrip("-"): o for o in self.option_names() if o.startswith("--")}
        near = difflib.get_close_matches(name.lstrip("-"), names, n=1)
        hint = (
            f"did you mean {names[near[0]]}?" if near else f"`{self.prog} --help` lists the options"
        )
        return f"unknown option {name} ({hint})"
