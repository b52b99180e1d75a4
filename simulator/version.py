"""The package's version, and the mark of origin every file it writes carries.

A user's file cannot carry these marks by accident, so "is this file one of ours, to
overwrite without asking?" is decided by them (see outputs.py).
"""

__version__ = "0.1.0"
NAME = "npu-memsim"

FORMAT_PREFIX = f"{NAME}/"  # JSON outputs: {"format": "npu-memsim/<kind>", ...}
PNG_SOFTWARE = f"{NAME} {__version__}"  # plots: the PNG "Software" text chunk


def format_mark(kind: str) -> str:
    return FORMAT_PREFIX + kind
