"""`kernel-hub --help`: says what the tool is, and every option of every command has a help text."""

from __future__ import annotations

import argparse

from registry.cli import _leaf_parsers, build_parser


def _undocumented(parser: argparse.ArgumentParser) -> list[str]:
    return [
        "/".join(a.option_strings) or a.dest
        for a in parser._actions
        if not isinstance(a, argparse._HelpAction) and not (a.help or "").strip()
    ]


def test_every_option_of_every_command_has_help():
    parser = build_parser()
    missing = {leaf.prog: _undocumented(leaf) for leaf in _leaf_parsers(parser)}
    assert not {prog: opts for prog, opts in missing.items() if opts}


def test_top_level_description_says_what_kernel_hub_is():
    text = build_parser().format_help()
    assert "build, publish, serve and load" in text and "argparse" not in text
