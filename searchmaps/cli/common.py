"""The plumbing every command shares: an argparse parser whose usage error is one line and
exit code 2, :func:`fail` (the one-line error of a bad setting), and the number parsers
of the flags. Imports nothing of the library (the report's command never loads torch)."""

from __future__ import annotations

import argparse
import os
import re
import shlex
import sys

EXIT_USAGE = 2


VALUE_OPTIONAL = ("--exit-eps",)  # flags whose value may be left out; a negative number after one is its value


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (no usage dump) and exit code 2; a negative
    number after a flag whose value is optional (``--exit-eps -1e-3``) is that flag's value
    (argparse would take it for an unknown flag), so the flag's own check names it."""

    def parse_known_args(self, args=None, namespace=None):
        args = list(sys.argv[1:] if args is None else args)
        out, i = [], 0
        while i < len(args):
            if args[i] in VALUE_OPTIONAL and i + 1 < len(args) and re.match(r"^-[\d.]", str(args[i + 1])):
                out.append(f"{args[i]}={args[i + 1]}")
                i += 2
                continue
            out.append(args[i])
            i += 1
        return super().parse_known_args(out, namespace)

    def error(self, message: str):  # noqa: D401 - argparse API
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)


def command_words(module: str, argv: list[str] | None = None) -> list[str]:
    """The command the user ran, to print back with a flag changed: ``$SEARCHMAPS_COMMAND``
    when a wrapper sets it (``bash dev.sh demo`` and its arguments), else the console script
    (``searchmaps-run``) or ``python -m module``, then ``argv`` (default: the process's)."""
    if os.environ.get("SEARCHMAPS_COMMAND"):
        return shlex.split(os.environ["SEARCHMAPS_COMMAND"])
    script = os.path.basename(sys.argv[0]) if sys.argv else ""
    head = [script] if script.startswith("searchmaps-") else ["python", "-m", module]
    return head + list(sys.argv[1:] if argv is None else argv)


def fail(prog: str, exc: Exception) -> int:
    print(f"{prog}: error: {exc}", file=sys.stderr)
    return EXIT_USAGE


def count(text: str) -> int:
    """An integer that may be written like 2e6."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value.is_integer():
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}")
    return int(value)


def counts(text: str) -> tuple[int, ...]:
    """One or more whole numbers, comma-separated (``3e5,1.2e6``): a horizon or a ladder."""
    return tuple(count(part) for part in text.split(","))


def numbers(text: str) -> tuple[float, ...]:
    return tuple(number(part) for part in text.split(","))


def number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


def thresholds(text: str) -> str:
    """``--exit-eps``'s value: at least one threshold (checked as numbers by the config);
    an empty value would turn the evaluation off without a word."""
    if not [part for part in text.strip().strip("()[]").split(",") if part.strip()]:
        raise argparse.ArgumentTypeError("give KL thresholds like 0,1e-3,1e-2, or no value for the default grid; "
                                         f"got {text!r}")
    return text


def texts(text: str) -> tuple[str, ...]:
    """A comma list of settings, each stripped (checked where it is used, naming its flag)."""
    return tuple(x.strip() for x in text.split(","))
