"""Argument types and options the commands share (cli_args.py builds most of the grammar,
cli_serve.py serve's)."""

from __future__ import annotations

import argparse


def add_quiet(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--quiet",
        action="store_true",
        help="no progress bar (there is none when stderr is not a terminal)",
    )


def add_no_cache(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--no-cache",
        action="store_true",
        help=f"simulate every one of its {what}, neither reading nor filling the cache of "
        "runs (python -m simulator cache)",
    )


def add_executor(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--executor",
        choices=("local", "dask"),
        default="local",
        help=f"{what} on local worker processes (default) or an existing Dask cluster",
    )
    parser.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="the Dask scheduler, e.g. tcp://10.0.0.5:8786 (with --executor dask)",
    )


def add_overrides(parser: argparse.ArgumentParser, help_text: str) -> None:
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="PATH=VALUE", help=help_text
    )


MODEL_SETS = (
    "change a model field (num_key_value_heads=8) or, prefixed with hardware., a hardware one "
    "(hardware.HBM.bandwidth=2TB/s); repeatable"
)


def split_overrides(texts: list[str]) -> tuple[list, list]:
    """`--set PATH=VALUE`s of a model and its hardware: the model's, and the hardware's (their
    `hardware.` prefix taken off)."""
    from .config.strict import HARDWARE_PREFIX, parse_overrides

    pairs = parse_overrides(texts, "--set")
    hardware = [(p[len(HARDWARE_PREFIX) :], v) for p, v in pairs if p.startswith(HARDWARE_PREFIX)]
    return [(p, v) for p, v in pairs if not p.startswith(HARDWARE_PREFIX)], hardware


def check_executor(args: argparse.Namespace) -> None:
    from .errors import SimulatorError

    if (args.executor == "dask") != bool(args.scheduler):
        raise SimulatorError("--executor dask and --scheduler ADDRESS go together")


MAX_WORKERS = 256


def at_least(minimum: int):
    """An integer option of at least `minimum`."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a whole number") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} must be at least {minimum}")
        return value

    return parse


count = at_least(1)  # a count of things
whole = at_least(0)  # a count that may be none (--generate 0)


def worker_count(text: str) -> int:
    value = count(text)
    if value > MAX_WORKERS:
        raise argparse.ArgumentTypeError(
            f"{value} is more worker processes than the "
            f"{MAX_WORKERS} this machine could sensibly run"
        )
    return value


def file_name(text: str) -> str:
    """A file or folder name option: an empty one is a slip, not 'no file'."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty name; give a file name")
    return text
