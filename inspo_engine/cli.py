"""The command line: `python -m inspo_engine config show …`; it parses arguments and prints, nothing more."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from .config import PRESETS, ConfigError, RunConfig, field_paths, parse_override, preset


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m inspo_engine", description="INSPO: instruction-policy co-evolution"
    )
    commands = parser.add_subparsers(dest="command", required=True)
    config = commands.add_parser("config", help="show, check or list run configurations")
    config_commands = config.add_subparsers(dest="config_command", required=True)
    show = config_commands.add_parser("show", help="print the full config as JSON")
    add_config_source(show)
    config_commands.add_parser("fields", help="list every field path")
    return parser


def add_config_source(parser: argparse.ArgumentParser) -> None:
    """--preset / --config FILE / --set key=value: how every command that needs a config gets one."""
    parser.add_argument("--preset", default="paper", choices=sorted(PRESETS), help="start from this preset")
    parser.add_argument("--config", type=Path, help="start from this JSON file instead of a preset")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a field: a dotted path (grpo.lr=1e-6) or a unique name (lr=1e-6); values parse as JSON",
    )


def load_config(args: argparse.Namespace) -> RunConfig:
    base = RunConfig.from_json(args.config.read_text(encoding="utf-8")) if args.config else preset(args.preset)
    overrides = dict(parse_override(text) for text in args.overrides)
    return base.with_overrides(overrides) if overrides else base


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "config" and args.config_command == "show":
            print(load_config(args).to_json())
        elif args.command == "config" and args.config_command == "fields":
            print("\n".join(field_paths()))
    except ConfigError as error:
        print("invalid config:", file=sys.stderr)
        for item in error.errors:
            print(f"  {item}", file=sys.stderr)
        return 2
    except OSError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
