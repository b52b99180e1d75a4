"""Errors a user can cause, each carrying every problem found with its place."""

from __future__ import annotations


class SimulatorError(Exception):
    """A mistake in the user's input: the CLI prints it on one line each and exits 2."""


class ConfigError(SimulatorError):
    """One or more problems in an input file, each '<file>: <field path>: <rule>'."""

    def __init__(self, source: str, problems: list[str]):
        self.source = source
        self.problems = list(problems)
        super().__init__("\n".join(f"{source}: {p}" for p in self.problems))


class Problems:
    """Collects every problem of a file before raising, so a user fixes them in one go."""

    def __init__(self, source: str):
        self.source = source
        self.items: list[str] = []

    def add(self, path: str, message: str) -> None:
        self.items.append(f"{path}: {message}" if path else message)

    def raise_if_any(self) -> None:
        if self.items:
            raise ConfigError(self.source, self.items)
