"""Error types shared by every part. ``UserError`` is shown to the user as one clear line."""


class UserError(Exception):
    """Bad input or an unreachable dependency, explained so the user can fix it."""


class ConfigError(UserError):
    """A configuration file is invalid. ``problems`` lists every problem, each with its path."""

    def __init__(self, source: str, problems: list[str]):
        self.source = source
        self.problems = list(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"{source}: {len(self.problems)} problem(s):\n{lines}")
