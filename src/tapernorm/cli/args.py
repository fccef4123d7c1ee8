"""What every part of the `tapernorm` command line shares: the parser class (one-line usage errors,
defaults in the help), number types for arguments, --device, and --allow-dirty."""

from __future__ import annotations

import argparse
import os
import sys


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Appends '(default: X)' to each option's help, unless there is no default to show."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.default is False or action.default == []:
            return action.help
        return super()._get_help_string(action)


class Parser(argparse.ArgumentParser):
    """Usage errors as one line (and exit status 2), pointing at --help instead of the usage; help
    with defaults (HelpFormatter). Subcommands' parsers are of this class too (argparse makes them
    of their parent's)."""

    def __init__(self, *args, formatter_class=HelpFormatter, **kwargs):
        super().__init__(*args, formatter_class=formatter_class, **kwargs)

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def parse_known_args(self, args=None, namespace=None):
        """argparse's, once every argument (up to a `--`) is valid text: a path of bytes that are
        not UTF-8 (or a lone surrogate) is a usage error naming it, before any work."""
        argv = sys.argv[1:] if args is None else list(args)
        for arg in argv[: argv.index("--") if "--" in argv else None]:
            shown = not_text(arg)
            if shown is not None:
                self.error(f"argument '{shown}' is not valid UTF-8 text: give it a UTF-8 name")
        return super().parse_known_args(argv, namespace)


def not_text(arg: object) -> str | None:
    """`arg` shown with its undecodable bytes escaped (\\xff) if it is a string that is not valid
    text, else None."""
    if not isinstance(arg, str):
        return None
    try:
        arg.encode("utf-8")
        return None
    except UnicodeEncodeError:
        pass
    try:
        return repr(os.fsencode(arg))[2:-1]
    except UnicodeEncodeError:
        return ascii(arg)[1:-1]


def number(kind: type, low: float, inclusive: bool = True):
    """An argparse type: a `kind` (int or float) >= low (> low when not inclusive)."""
    bound = f"{'>=' if inclusive else '>'} {low:g}"

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            value = None
        if value is None or not (value > low or (inclusive and value == low)):  # NaN fails too
            raise argparse.ArgumentTypeError(f"expected {kind.__name__} {bound}, got {text!r}")
        return value

    return parse


POSITIVE, NON_NEGATIVE = number(int, 1), number(int, 0)
POSITIVE_FLOAT, NON_NEGATIVE_FLOAT = number(float, 0, inclusive=False), number(float, 0)
DEVICES = ["auto", "cpu", "cuda"]
DEVICE_HELP = "auto: cuda when available, else cpu"


def device_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", default="auto", choices=DEVICES, help=DEVICE_HELP)


def allow_dirty_arg(p: argparse.ArgumentParser, only_with_out: bool = False) -> None:
    """--allow-dirty, on a command that writes results (a record, a measurement, a summary, a
    table, a figure): `tapernorm` (cli.main) refuses to run it from a checkout whose code differs
    from its commit unless this is given (provenance.writing_results); `only_with_out`: it writes
    only when its --out is given, and is checked only then."""
    p.add_argument(
        "--allow-dirty",
        action="store_true",
        help="write results from a checkout whose code (src/, workflow/, Snakefile, config/, ...: "
        "provenance.CODE_PATHS) differs from its commit, recorded as allow_dirty in their "
        "provenance (or set TAPERNORM_ALLOW_DIRTY=1); without it such a checkout is refused",
    )
    p.set_defaults(writes_results=_out_given if only_with_out else _always)


def _always(args: argparse.Namespace) -> bool:
    return True


def _out_given(args: argparse.Namespace) -> bool:
    return args.out is not None


def force_arg(p: argparse.ArgumentParser, command: str, files: str) -> None:
    """--force: write into an --out holding files the command did not write (out_dirs)."""
    p.add_argument(
        "--force",
        action="store_true",
        help=f"write into an --out that holds files {command} did not write: only {files} are "
        "replaced, every other file is kept",
    )


def config_json(text: str | None) -> dict | None:
    """A command's --config-json: the JSON object it holds (None for None); ConfigError if it is
    not JSON or not an object."""
    if text is None:
        return None
    import json

    from ..config import ConfigError

    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"--config-json is not valid JSON: {e}") from None
    if not isinstance(value, dict):
        raise ConfigError(f"--config-json: top level must be an object, not {type(value).__name__}")
    return value


def section_settings(text: str | None, section: str, flags: dict) -> dict:
    """Config section `section` of the workflow schema: the --config-json `text` validated with its
    defaults filled in (or the defaults alone), each of `flags` (key: value) that is not None (an
    option given) replacing its key."""
    from ..config import section_defaults, validate_section

    given = config_json(text)
    values = (
        section_defaults(section)
        if given is None
        else validate_section(given, section, "--config-json")
    )
    values.update({key: value for key, value in flags.items() if value is not None})
    return values


def with_default(text: str, value) -> str:
    """An option's help ending in its default as the schema states it, for options whose argparse
    default is None (so that a given option can be told from one left out)."""
    shown = " ".join(map(str, value)) if isinstance(value, list) else value
    return f"{text} (default: {shown})"
