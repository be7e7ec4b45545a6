"""The exporter's parts that depend on what the operator configured, each built with what it needs passed in:
the state file, the approver (with a policy), the actions runner (with an actions file), and this VM's
identity at start-up (for the OpenTelemetry resource). ``app.py`` puts them together.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from se_exporter.config.files import os_problem
from se_exporter.errors import ConfigError, IMDSError, IMDSStopped
from se_exporter.imds.client import IMDSClient
from se_exporter.imds.identity import VMIdentity
from se_exporter.metrics.textfile import TextfileWriter
from se_exporter.state.lock import LockHeld
from se_exporter.state.persistence import Persistence

if TYPE_CHECKING:  # imported at run time only when a policy or an actions file is configured
    from se_exporter.actions.config import Actions
    from se_exporter.actions.runner import ActionRunner
    from se_exporter.approval.approver import Approver
    from se_exporter.approval.policy import Policy

log = logging.getLogger("se_exporter.app")


def open_state_file(path: Path | None, observe_write: Callable[[float], None]) -> Persistence:
    """The state file, locked; a file that cannot be written is a start-up error, not a surprise at the first
    event."""
    try:
        return Persistence(path, observe_write=observe_write)
    except LockHeld as error:
        raise ConfigError(
            f"--state.file: {path} is in use by another se-exporter (pid {error.holder or 'unknown'}); two on one "
            "state file would approve every event twice"
        ) from None
    except OSError as error:
        raise ConfigError(f"--state.file: cannot write {path}: {os_problem(error)}") from None


def textfile_writer(path: Path | None) -> TextfileWriter | None:
    """The writer of ``--textfile.path``, once a file can be made beside it (else a start-up error)."""
    if path is None:
        return None
    writer = TextfileWriter(path)
    try:
        writer.probe()
    except OSError as error:
        raise ConfigError(f"--textfile.path: cannot write {path}: {os_problem(error)}") from None
    return writer


def approver(policy: Policy, client: IMDSClient, persistence: Persistence, poll_interval: float) -> Approver:
    from se_exporter.approval.approver import Approver

    def post(event_ids: Sequence[str]) -> None:
        client.approve(event_ids, paced=False)  # the poster waited for the slot before its recheck

    options: dict[str, Any] = {
        "can_remember": lambda: persistence.ok,
        # A POST waits for a look younger than two polls (approval/view.py: never one from before a pause),
        # for its request slot before its recheck, and for its decision to be on disk.
        "fresh_within": max(5.0, 2 * poll_interval),
        "pace": client.pace,
        "generation": lambda: persistence.next_generation,
        "remembered": persistence.wait_durable,
    }
    built = persistence.restore(
        "approvals",
        lambda section: Approver.from_state(section, policy, post, **options),
        lambda: Approver(policy, post, **options),
    )
    persistence.track("approvals", built)
    mode = "dry run: decisions are logged, nothing is approved" if policy.dry_run else "approvals are POSTed"
    log.info(
        "approval policy %s loaded: %d rule(s), leader=%s, %s", policy.source, len(policy.rules), policy.leader, mode
    )
    return built


def action_runner(actions: Actions, persistence: Persistence, clock: Callable[[], float]) -> ActionRunner:
    from se_exporter.actions.runner import ActionRunner

    options: dict[str, Any] = {
        "save": persistence.flush,
        "generation": lambda: persistence.next_generation,
        "clock": clock,
    }
    runner = persistence.restore(
        "actions",
        lambda section: ActionRunner.from_state(section, actions, **options),
        lambda: ActionRunner(actions, **options),
    )
    persistence.track("actions", runner)
    persistence.on_durable(runner.durable)  # a released run starts once the state saying so is on disk
    log.info("actions %s loaded: %s", actions.source, ", ".join(action.name for action in actions.actions))
    return runner


def startup_identity(probe: IMDSClient, given: VMIdentity | None) -> VMIdentity | None:
    """Compute metadata for the OTel resource; --vm.name, if given, stays the name. None if unknown (or
    if the exporter was stopped meanwhile: the stop follows at once)."""
    try:
        learned = probe.get_identity()
    except IMDSStopped:
        return given
    except IMDSError as error:
        log.warning("compute metadata unavailable: the OpenTelemetry resource has no cloud.* attributes: %s", error)
        return given
    finally:
        probe.close()
    log.info("learned VM identity name=%s vm_id=%s location=%s", learned.name, learned.vm_id, learned.location)
    return learned if given is None else msgspec.structs.replace(learned, name=given.name)
