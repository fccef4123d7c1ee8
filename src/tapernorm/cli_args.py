"""What every part of the `tapernorm` command line shares: the parser class (one-line usage errors,
defaults in the help), number types for arguments, and --device."""

from __future__ import annotations

import argparse


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
