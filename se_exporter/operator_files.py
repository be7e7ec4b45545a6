"""The files an operator writes, read and validated as the exporter uses them (``se-exporter check`` too).

Every configured file is read, and every problem of every file is reported at once, each on its own line
naming the file and the key path: an operator fixes them all in one go.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from se_exporter.config.options import ExporterConfig
from se_exporter.errors import ConfigError
from se_exporter.web.config import WebConfig, load_web_config

if TYPE_CHECKING:  # imported at run time only when a policy or an actions file is configured
    from se_exporter.actions.config import Actions
    from se_exporter.approval.policy import Policy

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class OperatorFiles:
    """The files an operator writes, read and validated as the exporter uses them."""

    web_config: WebConfig | None = None
    policy: Policy | None = None
    actions: Actions | None = None


def load_operator_files(config: ExporterConfig) -> OperatorFiles:
    """Read every configured file (``se-exporter check`` and the exporter alike); a ``ConfigError`` holds one
    line per problem, of every file, each naming the file and the key path."""
    problems: list[str] = []

    def attempt(load: Callable[[], T]) -> T | None:
        try:
            return load()
        except ConfigError as error:
            problems.extend(str(error).splitlines())
            return None

    web_file, policy_file, actions_file = config.web_config_file, config.approval_config, config.actions_config
    web_config = attempt(lambda: load_web_config(web_file)) if web_file is not None else None
    policy = attempt(lambda: _load_policy(policy_file)) if policy_file is not None else None
    actions = attempt(lambda: _load_actions(actions_file)) if actions_file is not None else None
    if problems:
        raise ConfigError("\n".join(problems))
    return OperatorFiles(web_config, policy, actions)


def _load_actions(path: Path) -> Actions:
    from se_exporter.actions.config import load_actions

    return load_actions(path)


def _load_policy(path: Path) -> Policy:
    """The approval package is imported only when a policy is configured."""
    from se_exporter.approval.policy import load_policy

    return load_policy(path)
