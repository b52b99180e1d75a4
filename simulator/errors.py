"""Errors a user can cause, each carrying every problem found with its place."""

from __future__ import annotations

QUOTE_CHARS = 60  # how much of a value an error message repeats


def quote(value: object) -> str:
    """A value as an error message repeats it: its repr, or the start of a long one and its
    size, so that one mistake is one short line whatever the user wrote."""
    text = repr(value)
    if len(text) <= QUOTE_CHARS:
        return text
    return f"{text[:QUOTE_CHARS]}... ({len(text):,} characters)"


def printable(text: str) -> str:
    """`text` with control and other invisible characters escaped ('\\n', '\\x1b'), so a name
    a user wrote cannot split an error line or drive the terminal."""
    if text.isprintable():
        return text
    return "".join(
        c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text
    )


def check_count(name: str, value: object, optional: bool = False) -> None:
    """An API argument that counts something (cycles, workers, tilings) must be a positive
    int: a mistake in calling code is a ValueError saying so, not a failure deep inside."""
    if optional and value is None:
        return
    if type(value) is not int or value < 1:
        raise ValueError(f"{name} must be a positive whole number, got {quote(value)}")


class SimulatorError(Exception):
    """A mistake in the user's input: the CLI prints it on one line each and exits 2."""


class ConfigError(SimulatorError):
    """One or more problems in an input file, each '<file>: <field path>: <rule>'.

    A problem that an override caused names the override instead of the file
    ('--set hardware.HBM.bandwidth=fast: ...'). `unknown_paths` holds the field paths that
    name no field at all (a misspelling, as opposed to a bad value)."""

    def __init__(self, source: str, problems: list[str], unknown_paths: tuple[str, ...] = ()):
        self.source = source
        self.problems = list(problems)
        self.unknown_paths = tuple(unknown_paths)
        super().__init__(
            "\n".join(
                printable(p if p.startswith(OVERRIDE_MARK) else f"{source}: {p}")
                for p in self.problems
            )
        )


OVERRIDE_MARK = "--set "


class Problems:
    """Collects every problem of a file before raising, so a user fixes them in one go.

    `overrides` maps each overridden field path to the override as the user wrote it, so a
    problem at (or under) that path is blamed on the override, not on the file."""

    def __init__(self, source: str, overrides: dict[str, str] | None = None):
        self.source = source
        self.overrides = overrides or {}
        self.items: list[str] = []
        self.unknown_paths: list[str] = []

    def add(self, path: str, message: str, unknown: bool = False) -> None:
        override = self.override_at(path)
        if override is not None:
            self.items.append(f"{OVERRIDE_MARK}{override}: {message}")
        else:
            self.items.append(f"{path}: {message}" if path else message)
        if unknown:
            self.unknown_paths.append(path)

    def override_at(self, path: str) -> str | None:
        for overridden, text in self.overrides.items():
            if path == overridden or path.startswith((overridden + ".", overridden + "[")):
                return text
        return None

    def raise_if_any(self) -> None:
        if self.items:
            raise ConfigError(self.source, self.items, tuple(self.unknown_paths))


class TilingError(SimulatorError):
    """A tiling that breaks a rule; the message names the field path, the rule and the numbers."""


class TooLargeError(TilingError):
    """A run that would need more instructions than memory can hold; `instructions` is about
    how many (of one kernel, or of the run), for a caller that words its own refusal."""

    def __init__(self, message: str, instructions: int = 0):
        super().__init__(message)
        self.instructions = instructions


class CycleBudgetError(SimulatorError):
    """A run went past the cycle budget it was given: stopped rather than left to hang."""


class InvariantError(AssertionError):
    """The model broke physics or its own bookkeeping (a bug in the simulator, never a user
    mistake): every internal check raises it."""
