"""kernel-hub: build, publish, serve and load fused-MLP GPU kernels on a hub that speaks the Hugging Face Hub API.

Each sub-command lives in a module of `registry.commands`. Any failure is printed as one line
`kernel-hub <command>: <what went wrong>; <what to do>` with a non-zero exit (`commands.failures`; the
traceback only with `--debug`). Progress goes through `logging`; this is where it is shown: plain lines
on stderr, INFO by default, DEBUG with `--verbose`, WARNING with `--quiet`.
"""

from __future__ import annotations

import argparse
import logging
import sys
import traceback


class _StderrHandler(logging.Handler):
    """Writes each record as a plain line to the *current* sys.stderr (tests and callers may swap it).

    Warnings and errors read `kernel-hub <command>: warning: <message>` once the command is known, as
    failures do (`kernel-hub <command>: <message>`)."""

    command: str | None = None

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record)
            if record.levelno >= logging.WARNING and self.command:
                line = warning_line(
                    self.command, line, "warning" if record.levelno == logging.WARNING else "error"
                )
            sys.stderr.write(line + "\n")
        except Exception:  # noqa: BLE001 - logging must never break the command
            self.handleError(record)


def warning_line(command: str, message: str, level: str = "warning") -> str:
    """`kernel-hub <command>: warning: <message>` (a message that names kernel-hub already is not named twice)."""
    for prefix in (f"kernel-hub {command}: ", "kernel-hub: "):
        message = message.removeprefix(prefix)
    return f"kernel-hub {command}: {level}: {message}"


def _show_warning(command: str):
    """`warnings.showwarning` for the CLI: one line, no source file and line (those are for developers)."""

    def show(message, category, filename, lineno, file=None, line=None) -> None:
        (file or sys.stderr).write(warning_line(command, " ".join(str(message).split())) + "\n")

    return show


def package_version() -> str:
    """kernel-hub's version: the installed distribution's, else this checkout's pyproject.toml."""
    from importlib import metadata

    try:
        return metadata.version("kernel-hub")
    except metadata.PackageNotFoundError:
        import tomllib
        from pathlib import Path

        try:
            with open(Path(__file__).resolve().parents[1] / "pyproject.toml", "rb") as f:
                return tomllib.load(f)["project"]["version"]
        except (OSError, KeyError, tomllib.TOMLDecodeError):
            return "unknown"


def _add_output_flags(parser: argparse.ArgumentParser, default) -> None:
    group = parser.add_argument_group("output")
    noise = group.add_mutually_exclusive_group()
    noise.add_argument("-v", "--verbose", action="store_true", default=default, help="show debug progress")
    noise.add_argument("-q", "--quiet", action="store_true", default=default, help="show only warnings")
    group.add_argument(
        "--debug", action="store_true", default=default, help="print the traceback of a failed command"
    )


def _leaf_parsers(parser: argparse.ArgumentParser):
    """The parsers that run a command (no sub-commands below them)."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield parser
    for action in subs:
        for child in dict.fromkeys(action.choices.values()):
            yield from _leaf_parsers(child)


def build_parser() -> argparse.ArgumentParser:
    from registry import commands  # every sub-command module imports its heavy parts only when it runs

    parser = argparse.ArgumentParser(prog="kernel-hub", description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", action="version", version=f"kernel-hub {package_version()}")
    _add_output_flags(parser, False)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands.register(sub)
    for leaf in _leaf_parsers(parser):
        if leaf is not parser:  # also accepted after the sub-command; SUPPRESS keeps the top-level value
            _add_output_flags(leaf, argparse.SUPPRESS)
    return parser


def setup_logging(verbose: bool = False, quiet: bool = False, command: str | None = None) -> None:
    """Progress of `registry.*` as plain lines on stderr (one handler, however often this is called)."""
    logger = logging.getLogger("registry")
    # By class name: `python -m registry.cli` runs this module as __main__, and `serve`'s app then imports it
    # again as registry.cli, whose _StderrHandler is another class (every access-log line came out twice).
    for handler in [h for h in logger.handlers if type(h).__name__ == _StderrHandler.__name__]:
        logger.removeHandler(handler)
    handler = _StderrHandler()
    handler.command = command
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG if verbose else logging.WARNING if quiet else logging.INFO)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args.verbose, args.quiet, args.command)
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.showwarning = _show_warning(args.command)
            return int(args.func(args) or 0)
    except (Exception, KeyboardInterrupt) as e:  # noqa: BLE001 - every failure ends in one line
        from registry.commands.failures import describe

        if args.debug:
            traceback.print_exc()
        message, code = describe(e)
        print(f"kernel-hub {args.command}: {message}", file=sys.stderr)
        return code


if __name__ == "__main__":
    sys.exit(main())
