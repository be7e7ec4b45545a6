"""Typed, strict access to one mapping of the web config file (shared by the top level and TLS)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from se_exporter.config import files as config_file
from se_exporter.config.files import show

# Keys exporter-toolkit has that se-exporter refuses, with the reason (a plain "unknown key" would mislead).
_UNSUPPORTED_KEYS = {
    "rate_limit": "is not supported by se-exporter (rate-limit in a reverse proxy or by network policy instead)",
    "tls_server_config.cert": "inline certificates are not supported by se-exporter; use cert_file",
    "tls_server_config.key": "inline keys are not supported by se-exporter; use key_file",
    "tls_server_config.client_ca": "inline client CAs are not supported by se-exporter; use client_ca_file",
}


class WebConfigFields(config_file.Fields):
    """One mapping of the web config; keys exporter-toolkit has but we refuse say why."""

    kind = "web config"

    def check_key(self, key: str) -> None:
        unsupported = _UNSUPPORTED_KEYS.get(self.key_path(key))
        if unsupported:
            self.fail(key, unsupported)

    def sub(self, key: str, value: object) -> WebConfigFields | None:
        return None if value is None else WebConfigFields(self.source, self.key_path(key), value, None)

    def string(self, key: str) -> str | None:
        value = self.data.get(key)
        if value is None or value == "":
            return None
        if not isinstance(value, str):
            self.fail(key, f"must be a string, got {show(value)}")
        return value

    def path(self, key: str, base: Path, *, required: bool = False) -> Path | None:
        value = self.string(key)
        if value is None:
            if required:
                self.fail(key, "is required")
            return None
        return base / Path(value).expanduser()  # an absolute value replaces base

    def string_list(self, key: str, *, choices: Sequence[str] | None = None) -> tuple[str, ...]:
        value = self.data.get(key)
        if value is None:
            return ()
        if not isinstance(value, list):
            self.fail(key, f"must be a list of strings, got {show(value)}")
        return self.check_strings(key, value, choices)
