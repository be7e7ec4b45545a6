"""Typed field access for the approval policy file (strict YAML reading is in ``config_file``).

Every problem raises ``ConfigError`` as ``approval config <file>: <key path>: <problem>``, so the
operator sees which key is wrong and why before the exporter starts.
"""

from __future__ import annotations

from collections.abc import Sequence

from se_exporter.config import files as config_file
from se_exporter.config.files import show

__all__ = ["Fields", "load_yaml", "show"]


KIND = "approval config"


def load_yaml(source: str, text: str) -> object:
    return config_file.load_yaml(KIND, source, text)


class Fields(config_file.Fields):
    """One mapping of the policy file being validated: typed getters that name the key on error."""

    kind = KIND

    def integer(self, key: str, minimum: int) -> int | None:
        if key not in self.data:
            return None
        value = self.data[key]
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            self.fail(key, f"must be an integer >= {minimum}, got {show(value)}")
        return value

    def positive_number(self, key: str, default: float) -> float:
        value = self.data.get(key, default)
        if not isinstance(value, int | float) or isinstance(value, bool) or not 0 < value < float("inf"):
            self.fail(key, f"must be a number of seconds > 0, got {show(value)}")
        return float(value)

    def string(self, key: str, *, required: bool = False) -> str | None:
        if key not in self.data:
            if required:
                self.fail(key, "is required")
            return None
        value = self.data[key]
        if not isinstance(value, str) or not value.strip():
            self.fail(key, f"must be a non-empty string, got {show(value)}")
        return value

    def choice(self, key: str, choices: Sequence[str], default: str) -> str:
        value = self.data.get(key, default)
        if value not in choices:
            self.fail(key, f"must be one of {', '.join(choices)}, got {show(value)}")
        return str(value)

    def string_list(
        self, key: str, *, choices: Sequence[str] | None = None, required: bool = False
    ) -> tuple[str, ...] | None:
        """A non-empty list of distinct non-empty strings (each one of ``choices`` when given)."""
        if key not in self.data:
            if required:
                self.fail(key, "is required")
            return None
        value = self.data[key]
        if not isinstance(value, list) or not value:
            self.fail(key, f"must be a non-empty list of strings, got {show(value)}")
        items = self.check_strings(key, value, choices)
        for index, item in enumerate(items):
            if item in items[:index]:
                self.fail(f"{key}[{index}]", f"{show(item)} is listed twice")
        return items
