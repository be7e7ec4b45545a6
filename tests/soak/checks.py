"""What the soak proves, each check against the simulator's ground truth; each returns its figures.

Every check raises ``AssertionError`` with the evidence; ``all_checks`` runs them all and returns the
figures of the README table.
"""

from __future__ import annotations

import bisect
import itertools
import json
import re
from collections import Counter, defaultdict
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from se_exporter.imds.document import EVENT_TYPES
from se_exporter.lifecycle.transitions import TransitionKind
from se_exporter.simulator import SELF
from se_exporter.simulator.truth import Change
from tests.soak.chaos import FIRST_ANSWER_DELAY, SLOW_ANSWER, ExporterRun, SoakResult
from tests.soak.history import Expected, expected_transitions
from tests.support.exposition import value

TRANSITION = "scheduled_event.transition"
MAX_RSS_GROWTH_KB = 10 * 1024
MAX_RSS_KB = 96 * 1024  # the DaemonSet's memory limit (deploy/)


def all_checks(result: SoakResult) -> dict[str, Any]:
    assert not result.errors, "unexpected events during the run:\n" + "\n".join(result.errors)
    expected = expected_transitions(result.changes, result.blind)
    figures: dict[str, Any] = {}
    figures.update(check_no_crash(result))
    figures.update(check_observable(result))
    figures.update(check_transitions(result, expected))
    figures.update(check_stderr(result, expected))
    figures.update(check_counters(result, expected))
    figures.update(check_approvals(result))
    figures.update(check_request_rate(result))
    figures.update(check_memory(result))
    figures.update(fault_figures(result))
    figures.update(
        {
            "events": len({e.event_id for e in expected}),
            "event_shapes": result.plan.shapes,
            "incarnation_resets": sum(1 for c in result.changes if c.kind == "incarnation_reset"),
            "hours_simulated": round(result.sim_seconds / 3600, 2),
            "wall_seconds": round(result.wall_seconds, 1),
            "speed": result.config.speed,
            "seed": result.config.seed,
        }
    )
    return figures


def check_no_crash(result: SoakResult) -> dict[str, Any]:
    wanted = {"SIGKILL": -9, "SIGTERM": 0, "final": 0}
    for run in result.runs:
        assert run.how in wanted, f"exporter run {run.index} ended as {run.how!r}:\n{run.process.logs()[-3000:]}"
        assert run.exit_code == wanted[run.how], f"run {run.index} ({run.how}) exited {run.exit_code}"
        text = run.process.logs()
        assert "Traceback" not in text, f"run {run.index} logged a traceback:\n{text[-3000:]}"
    return {"exporter_runs": len(result.runs)}


def good_serves(result: SoakResult) -> list[float]:
    """Monotonic times of scheduled-events documents served intact to a process that lived on.

    Excluded: injected faults other than slow answers the client waits out, and documents served in
    the last second before a SIGKILL (the process may have died before handling them).
    """
    kills = [run.ended for run in result.runs if run.how == "SIGKILL" and run.ended is not None]
    waited = {f"first_response_delay:{FIRST_ANSWER_DELAY:g}s", f"delay:{SLOW_ANSWER:g}s"}
    times = []
    for request in result.requests:
        if request.method != "GET" or "/scheduledevents" not in request.path or request.status != 200:
            continue
        if request.fault is not None and not set(request.fault.split(",")) <= waited:
            continue
        if any(kill - 1.0 <= request.real_monotonic <= kill for kill in kills):
            continue
        times.append(request.real_monotonic)
    return sorted(times)


def check_observable(result: SoakResult) -> dict[str, Any]:
    """The premise of an exact expectation: every state of every event met an intact answer.

    A failure here is a flaw of the test's timing (a state shorter than a blind window), not of the
    exporter; the message says which state.
    """
    serves = good_serves(result)
    by_event: dict[str, list[Change]] = defaultdict(list)
    for change in result.changes:
        if change.event_id is not None:
            by_event[change.event_id].append(change)
    shortest = until_approved = float("inf")
    for event_id, changes in by_event.items():
        for before, after in itertools.pairwise(changes):
            start, end = before.real_monotonic, after.real_monotonic
            if any(start < blind_end and end > blind_start for blind_start, blind_end, _, _ in result.blind):
                continue  # a state the paused exporter may not see: the expectations say what it can know
            if after.reason == "approval":  # ended by the exporter's own POST: it saw the state (maybe
                until_approved = min(until_approved, end - start)  # from a process killed right after,
                continue  # which good_serves leaves out)
            shortest = min(shortest, end - start)
            i = bisect.bisect_right(serves, start)
            assert i < len(serves) and serves[i] < end - 0.05, (
                f"test timing flaw: a state of {event_id} lasted {end - start:.2f} s "
                f"(from {start:.2f}) without any intact answer served"
            )
    gaps = [b - a for a, b in itertools.pairwise(serves)]
    return {
        "longest_blind_window_s": round(max(gaps, default=0.0), 2),
        "exporter_pauses": len(result.pauses),
        "exporter_restarts_longer_than_a_gap": len(result.long_restarts),
        "shortest_state_s": round(shortest, 2),
        "shortest_state_ended_by_approval_s": round(until_approved, 3),
    }


def transition_logs(result: SoakResult) -> list[tuple[int, str, dict[str, Any], int]]:
    """(receipt index, uid, attributes, time ns) of OTLP transition records, first delivery of each uid."""
    seen: set[str] = set()
    out = []
    for index, log in enumerate(result.logs):
        if log.event_name != TRANSITION:
            continue
        uid = str(log.attributes["log.record.uid"])
        if uid in seen:
            continue
        seen.add(uid)
        out.append((index, uid, dict(log.attributes), log.time_unix_nano))
    return out


def _key(event_id: str, kind: str, not_before: datetime | None) -> tuple[str, str, str]:
    shown = not_before.timestamp() if not_before is not None and kind in ("scheduled", "rescheduled") else None
    return event_id, kind, "" if shown is None else f"{shown:.0f}"


def check_transitions(result: SoakResult, expected: list[Expected]) -> dict[str, Any]:
    """OTLP records (deduplicated by ``log.record.uid``, as receivers do) equal the truth, exactly."""
    received = transition_logs(result)
    raw = sum(1 for log in result.logs if log.event_name == TRANSITION)
    got: dict[tuple[str, str, str], list[int]] = defaultdict(list)
    for index, _uid, attrs, _ns in received:
        nb = attrs.get("scheduled_event.not_before")
        moment = datetime.fromisoformat(str(nb).replace("Z", "+00:00")) if nb else None
        got[_key(str(attrs["scheduled_event.id"]), str(attrs[TRANSITION]), moment)].append(index)
    want = Counter(_key(e.event_id, e.kind, e.not_before) for e in expected)
    lost = sorted(k for k in want if len(got.get(k, [])) < want[k])
    extra = sorted(k for k in got if len(got[k]) > want.get(k, 0))
    assert not lost, f"{len(lost)} transition(s) never delivered (records lost), e.g. {lost[:5]}"
    assert not extra, f"{len(extra)} transition(s) delivered that did not happen or twice, e.g. {extra[:5]}"

    by_uid_index = {index: (attrs, ns) for index, _uid, attrs, ns in received}
    latencies = []
    per_event: dict[str, list[str]] = defaultdict(list)
    for e in expected:
        index = got[_key(e.event_id, e.kind, e.not_before)][0]
        attrs, ns = by_uid_index[index]
        assert attrs["scheduled_event.type"] == e.event_type, f"{e}: type {attrs['scheduled_event.type']}"
        latencies.append(ns / 1e9 - e.real_time)
    for _index, _uid, attrs, _ns in received:
        per_event[str(attrs["scheduled_event.id"])].append(str(attrs[TRANSITION]))
    truth_order: dict[str, list[str]] = defaultdict(list)
    for e in expected:
        truth_order[e.event_id].append(e.kind)
    wrong = {k: (per_event[k], v) for k, v in truth_order.items() if per_event[k] != v}
    assert not wrong, f"per-event order differs (delivered, truth): {list(wrong.items())[:3]}"
    # Across events: first in, first out. Records are delivered in the order the exporter observed them
    # (their timestamps, the poll that saw each change), whatever the blind windows around them lasted:
    # a restart on a loaded machine may see changes of many seconds at once, in the document's order.
    observed = [(index, ns) for index, _uid, _attrs, ns in received]
    late = [(a, b) for a, b in itertools.pairwise(observed) if b[1] < a[1]]
    assert not late, (
        f"{len(late)} record(s) delivered after one the exporter observed later, e.g. #{late[0][1][0]} "
        f"({late[0][0][1] - late[0][1][1]} ns older than #{late[0][0][0]} before it)"
    )
    assert min(latencies) > -0.5, f"a transition observed before it happened ({min(latencies):.2f} s)"
    return {
        "transitions_checked": len(expected),
        "records_lost": len(lost),
        "otlp_records_delivered": raw,
        "otlp_duplicate_deliveries": raw - len(received),
        "completed_start_unseen": sum(
            1 for *_, attrs, _ns in received if attrs.get("scheduled_event.started_observed") is False
        ),
        "max_observation_latency_s": round(max(latencies, default=0.0), 2),
    }


def stderr_transitions(run: ExporterRun) -> list[dict[str, Any]]:
    """The JSON transition lines of one exporter process (``--log.format=json``)."""
    lines = []
    for line in run.process.logs().splitlines():
        if '"scheduled_event.transition"' not in line:
            continue
        record = json.loads(line)
        if record.get("event") == TRANSITION:
            lines.append(record)
    return lines


def check_stderr(result: SoakResult, expected: list[Expected]) -> dict[str, Any]:
    """Each transition is on stderr once; only a SIGKILL may make the next process repeat it (same uid)."""
    otlp = {uid: attrs for _i, uid, attrs, _ns in transition_logs(result)}
    first_run: dict[str, int] = {}
    repeats = 0
    for run in result.runs:
        uids = [str(line["log.record.uid"]) for line in stderr_transitions(run)]
        dup = [uid for uid, n in Counter(uids).items() if n > 1]
        assert not dup, f"run {run.index} logged a transition twice: {dup[:3]}"
        for line in stderr_transitions(run):
            uid = str(line["log.record.uid"])
            assert uid in otlp, f"stderr transition {uid} ({line.get('msg')}) never reached OTLP"
            assert line["scheduled_event.id"] == otlp[uid]["scheduled_event.id"]
            assert line[TRANSITION] == otlp[uid][TRANSITION]
            if uid in first_run:
                between = result.runs[first_run[uid] : run.index]  # each killed before it saved the state
                assert all(r.how == "SIGKILL" for r in between), (
                    f"{uid} logged by run {first_run[uid]} and again by run {run.index}, "
                    f"after {[r.how for r in between]}"
                )
                repeats += 1
            else:
                first_run[uid] = run.index
    assert set(first_run) == set(otlp), f"{len(set(otlp) - set(first_run))} OTLP transition(s) not on stderr"
    assert len(first_run) == len(expected)
    return {"stderr_repeats_after_sigkill": repeats}


def check_counters(result: SoakResult, expected: list[Expected]) -> dict[str, Any]:
    """transitions_total of the last process equals what it logged; all processes together, the truth."""
    final = result.runs[-1]
    lines = Counter((str(r["scheduled_event.type"]), str(r[TRANSITION])) for r in stderr_transitions(final))
    for event_type in EVENT_TYPES:
        for kind in TransitionKind:
            counter = value(
                result.final_metrics, "azure_scheduled_events_transitions_total", event_type=event_type, transition=kind
            )
            counter = counter or 0.0  # a series exists from its first count
            assert counter == lines[(event_type, kind)], (
                f"transitions_total{{{event_type},{kind}}} = {counter}, the process logged {lines[(event_type, kind)]}"
            )
    total: Counter[tuple[str, str]] = Counter()
    seen: set[str] = set()
    for run in result.runs:
        for record in stderr_transitions(run):
            if record["log.record.uid"] not in seen:
                seen.add(str(record["log.record.uid"]))
                total[(str(record["scheduled_event.type"]), str(record[TRANSITION]))] += 1
    truth = Counter((e.event_type, e.kind) for e in expected)
    assert total == truth, f"transitions by type and kind differ from the truth: {total - truth} / {truth - total}"
    return {
        "counter_series_checked": len(EVENT_TYPES) * len(TransitionKind),
        "transitions_by_last_process": sum(lines.values()),
    }


def check_approvals(result: SoakResult) -> dict[str, Any]:
    """No approval outside the policy, none twice, none for an event this VM does not lead; none missed."""
    plans = {result.ids[item.alias]: item.plan for item in result.plan.scenario.events}
    approved: Counter[str] = Counter()
    for record in result.approvals:
        assert record.valid, f"malformed approval POST: {record.body!r}"
        for event_id, outcome in record.outcomes.items():
            approved[event_id] += 1
            assert outcome == "started", f"approval of {event_id}: {outcome} (approved twice, or unknown)"
    twice = [event_id for event_id, n in approved.items() if n > 1]
    assert not twice, f"approved more than once: {twice}"
    for event_id in approved:
        plan = plans[event_id]
        assert _policy_allows(plan), f"{event_id} approved outside the policy: {plan}"
        assert plan.resources[0] == SELF, f"{event_id} approved but this VM does not lead it: {plan.resources}"
    appeared_scheduled = {c.event_id for c in result.changes if c.kind == "appeared" and c.status == "Scheduled"}
    due = {
        event_id
        for event_id in appeared_scheduled
        if event_id is not None
        and _policy_allows(plans[event_id])
        and plans[event_id].resources[0] == SELF
        and not _scheduled_while_paused(event_id, result)  # it may start before the exporter can approve it
    }
    missed = sorted(due - set(approved))
    assert not missed, f"{len(missed)} event(s) the policy approves were not approved: {missed[:5]}"
    return {"approvals": len(approved), "approvable_events": len(due)}


def _scheduled_while_paused(event_id: str, result: SoakResult) -> bool:
    """Whether the event was Scheduled at some moment of a pause of the exporter."""
    times = [c.real_monotonic for c in result.changes if c.event_id == event_id]
    scheduled_from, scheduled_until = times[0], times[1] if len(times) > 1 else float("inf")
    return any(scheduled_from < end and scheduled_until > start for start, end, _, _ in result.blind)


def _policy_allows(plan: Any) -> bool:
    return bool(plan.event_source == "User" or (plan.event_type == "Freeze" and 0 <= plan.duration <= 8))


def check_request_rate(result: SoakResult) -> dict[str, Any]:
    """No one-second window (closed at both ends) holds more than 5 IMDS requests."""
    times = sorted(t for t, _m, _e in result.arrivals)
    worst, worst_at = 0, 0.0
    for i, t in enumerate(times):
        n = bisect.bisect_right(times, t + 1.0) - i
        if n > worst:
            worst, worst_at = n, t
    assert worst <= 5, f"{worst} IMDS requests within one second (from monotonic {worst_at:.3f})"
    throttled = sum(1 for r in result.requests if r.status == 429 and r.fault == "status:429")
    return {"imds_requests": len(times), "max_requests_in_1s": worst, "answers_429": throttled}


def check_memory(result: SoakResult) -> dict[str, Any]:
    """RSS of the longest-lived (last) process: flat after warm-up; every process below a ceiling."""
    assert result.rss, "no RSS samples"
    peak = max(kb for _r, _t, kb in result.rss)
    assert peak < MAX_RSS_KB, f"an exporter process reached {peak / 1024:.0f} MiB"
    last = [(t, kb) for run, t, kb in result.rss if run == result.runs[-1].index]
    start = last[0][0] + result.config.warmup
    after = [kb for t, kb in last if t >= start]
    assert len(after) >= 6, f"too few RSS samples after warm-up ({len(after)})"
    head, tail = sorted(after[:5])[2], sorted(after[-5:])[2]
    growth = tail - head
    assert growth < MAX_RSS_GROWTH_KB, f"RSS grew {growth / 1024:.1f} MiB after warm-up ({head} -> {tail} kB)"
    return {
        "rss_growth_kib": growth,
        "rss_peak_mib": round(peak / 1024, 1),
        "rss_window_s": round(last[-1][0] - start, 1),
    }


def fault_figures(result: SoakResult) -> dict[str, Any]:
    kinds: Counter[str] = Counter()
    for request in result.requests:
        for label in (request.fault or "").split(","):
            if label:
                kinds[re.sub(r":.*", "", label) if label.startswith(("first_response", "delay")) else label] += 1
    kinds.update(run.how for run in result.runs if run.how in ("SIGKILL", "SIGTERM"))
    kinds.update(f"otlp_{kind}" for kind, _s in result.otlp_outages)
    return {
        "faults_injected": sum(kinds.values()),
        "faults_by_kind": dict(sorted(kinds.items())),
        "otlp_outage_seconds": round(sum(s for _k, s in result.otlp_outages), 1),
    }


def summarise(figures: dict[str, Any], keys: Iterable[str] = ()) -> str:
    shown = {k: figures[k] for k in keys} if keys else figures
    return json.dumps(shown, indent=2, sort_keys=True)
