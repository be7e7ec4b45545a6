"""Fault injection: a mutable, thread-safe plan consulted for every IMDS request.

A plan is an ordered list of :class:`FaultRule`. For each request, the first rule that matches
the request (method and endpoint), still has a count left and wins its probability draw fires and
uses up one count. Kinds:

``status``     answer ``status`` (500, 503, 429, 410, ...) with an IMDS-like error body
``malformed``  answer 200 with a broken body: ``truncated``, ``wrong_types``, ``missing_event_id``,
               ``not_json``, ``empty``
``reset``      close the connection without answering (TCP reset)
``delay``      wait ``delay_s`` real seconds, then answer normally (to cause client timeouts)
``drip``       answer normally, but one byte every ``delay_s`` real seconds (a slow, never-ending answer)

Malformed variants include ``gzip_bomb``: a 200 with ``Content-Encoding: gzip`` that inflates to 256 MiB, and
``too_many_events`` / ``too_many_resources``: valid JSON under 4 MiB listing more than an exporter holds.

Besides rules: ``first_response_delay_s`` delays the very first scheduled-events request (IMDS
may take up to two minutes to answer the first call), and ``rate_limit_per_s`` answers 429 beyond
that many IMDS requests in any one-second window (IMDS allows 5/s per VM; off by default).
Delays are real seconds, not simulated ones.
"""

from __future__ import annotations

import dataclasses
import random
import threading
from collections import deque
from dataclasses import dataclass
from typing import Any

KINDS = ("status", "malformed", "reset", "delay", "drip")
MALFORMED = (
    "truncated",
    "wrong_types",
    "missing_event_id",
    "not_json",
    "empty",
    "gzip_bomb",
    "too_many_events",
    "too_many_resources",
)
ENDPOINTS = ("scheduledevents", "compute", "any")
METHODS = ("GET", "POST", "any")


@dataclass
class FaultRule:
    """One fault; ``count=None`` fires without limit (subject to ``probability``)."""

    kind: str
    count: int | None = 1
    probability: float = 1.0
    status: int = 503
    malformed: str = "truncated"
    delay_s: float = 0.0
    method: str = "any"
    endpoint: str = "scheduledevents"

    def __post_init__(self) -> None:
        checks = (
            ("kind", self.kind in KINDS, f"one of {', '.join(KINDS)}"),
            ("count", self.count is None or self.count >= 0, "null or >= 0"),
            ("probability", 0.0 <= self.probability <= 1.0, "between 0 and 1"),
            ("status", 400 <= self.status <= 599, "an HTTP error code (400-599)"),
            ("malformed", self.malformed in MALFORMED, f"one of {', '.join(MALFORMED)}"),
            ("delay_s", self.delay_s >= 0, ">= 0"),
            ("method", self.method in METHODS, f"one of {', '.join(METHODS)}"),
            ("endpoint", self.endpoint in ENDPOINTS, f"one of {', '.join(ENDPOINTS)}"),
        )
        for key, ok, expected in checks:
            if not ok:
                raise ValueError(f"fault rule {key}: must be {expected}, got {getattr(self, key)!r}")

    def matches(self, method: str, endpoint: str) -> bool:
        return self.method in ("any", method) and self.endpoint in ("any", endpoint) and self.count != 0

    def describe(self) -> str:
        detail = {"status": str(self.status), "malformed": self.malformed, "delay": f"{self.delay_s:g}s"}
        return f"{self.kind}:{detail[self.kind]}" if self.kind in detail else self.kind


class FaultPlan:
    """Thread-safe fault plan; tests may change it while the server runs."""

    def __init__(
        self,
        rules: list[FaultRule] | None = None,
        *,
        first_response_delay_s: float = 0.0,
        rate_limit_per_s: int | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self._lock = threading.Lock()
        self._rules = list(rules or [])
        self._first_delay = first_response_delay_s
        self._first_done = False
        self._rate_limit = rate_limit_per_s
        self._recent: deque[float] = deque()
        self._rng = rng or random.Random()  # noqa: S311 - fault dice, not secrets
        self._refused_versions: frozenset[str] = frozenset()

    def refuse_api_versions(self, versions: frozenset[str] | set[str]) -> None:
        """Answer these api-versions as IMDS answers one it does not serve (400, "api-version is invalid"),
        until changed: a VM not enrolled in a preview yet; an empty set accepts every version again."""
        with self._lock:
            self._refused_versions = frozenset(versions)

    def refuses(self, api_version: str) -> bool:
        with self._lock:
            return api_version in self._refused_versions

    def add(self, rule: FaultRule) -> FaultRule:
        with self._lock:
            self._rules.append(rule)
        return rule

    def fail_next(
        self, status: int, count: int | None = 1, *, method: str = "any", endpoint: str = "scheduledevents"
    ) -> FaultRule:
        """Answer ``status`` to the next ``count`` matching requests."""
        return self.add(FaultRule("status", count, status=status, method=method, endpoint=endpoint))

    def malformed_next(
        self,
        variant: str = "truncated",
        count: int | None = 1,
        *,
        method: str = "any",
        endpoint: str = "scheduledevents",
    ) -> FaultRule:
        return self.add(FaultRule("malformed", count, malformed=variant, method=method, endpoint=endpoint))

    def reset_next(self, count: int | None = 1, *, method: str = "any", endpoint: str = "scheduledevents") -> FaultRule:
        return self.add(FaultRule("reset", count, method=method, endpoint=endpoint))

    def delay_next(
        self, seconds: float, count: int | None = 1, *, method: str = "any", endpoint: str = "scheduledevents"
    ) -> FaultRule:
        return self.add(FaultRule("delay", count, delay_s=seconds, method=method, endpoint=endpoint))

    def drip_next(
        self, seconds_per_byte: float, count: int | None = 1, *, method: str = "any", endpoint: str = "scheduledevents"
    ) -> FaultRule:
        return self.add(FaultRule("drip", count, delay_s=seconds_per_byte, method=method, endpoint=endpoint))

    def set_first_response_delay(self, seconds: float) -> None:
        with self._lock:
            self._first_delay, self._first_done = seconds, False

    def set_rate_limit(self, per_second: int | None) -> None:
        with self._lock:
            self._rate_limit = per_second

    def clear(self) -> None:
        with self._lock:
            self._rules.clear()
            self._first_delay = 0.0
            self._rate_limit = None

    def first_response_delay(self, endpoint: str) -> float:
        """Delay owed by this request: non-zero once, for the first scheduled-events request."""
        with self._lock:
            if endpoint != "scheduledevents" or self._first_done:
                return 0.0
            self._first_done = True
            return self._first_delay

    def decide(self, method: str, endpoint: str, real_monotonic: float) -> FaultRule | None:
        """The fault for this request, if any (uses up one count)."""
        with self._lock:
            if self._over_rate_limit(real_monotonic):
                return FaultRule("status", status=429, endpoint="any")
            for rule in self._rules:
                if rule.matches(method, endpoint) and self._rng.random() < rule.probability:
                    if rule.count is not None:
                        rule.count -= 1
                    return dataclasses.replace(rule)
            return None

    def _over_rate_limit(self, now: float) -> bool:
        if self._rate_limit is None:
            return False
        while self._recent and now - self._recent[0] >= 1.0:
            self._recent.popleft()
        self._recent.append(now)
        return len(self._recent) > self._rate_limit

    def to_json(self) -> dict[str, Any]:
        with self._lock:
            return {
                "rules": [dataclasses.asdict(r) for r in self._rules],
                "first_response_delay_s": self._first_delay,
                "rate_limit_per_s": self._rate_limit,
            }

    def update_from_json(self, data: Any) -> None:
        """Apply ``{"rules": [...], "replace": bool, "first_response_delay_s": s, "rate_limit_per_s": n}``.

        Rules are appended unless ``replace`` is true; raises ValueError naming the bad key.
        """
        if not isinstance(data, dict):
            raise ValueError("fault plan must be a JSON object")
        unknown = set(data) - {"rules", "replace", "first_response_delay_s", "rate_limit_per_s"}
        if unknown:
            raise ValueError(f"fault plan: unknown key {sorted(unknown)[0]!r}")
        rules = [_rule_from_json(item, i) for i, item in enumerate(data.get("rules", []))]
        delay, limit = data.get("first_response_delay_s"), data.get("rate_limit_per_s")
        # Checked before anything changes: a bad value must not half-apply the plan or break every later answer.
        if "first_response_delay_s" in data and not _is_number(delay, minimum=0):
            raise ValueError(f"fault plan: first_response_delay_s must be a number >= 0, got {delay!r}")
        if limit is not None and not (_is_number(limit, minimum=0) and isinstance(limit, int)):
            raise ValueError(
                f"fault plan: rate_limit_per_s must be an integer >= 0 or null (0, null: off), got {limit!r}"
            )
        with self._lock:
            if data.get("replace", False):
                self._rules.clear()
            self._rules.extend(rules)
            if "first_response_delay_s" in data:
                self._first_delay, self._first_done = float(data["first_response_delay_s"]), False
            if "rate_limit_per_s" in data:
                self._rate_limit = limit or None  # 0 is off, as for --fault.rate-limit


def _is_number(value: Any, minimum: float) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value >= minimum


def _rule_from_json(item: Any, index: int) -> FaultRule:
    fields = {f.name for f in dataclasses.fields(FaultRule)}
    if not isinstance(item, dict):
        raise ValueError(f"rules[{index}]: must be an object")
    unknown = set(item) - fields
    if unknown:
        raise ValueError(f"rules[{index}]: unknown key {sorted(unknown)[0]!r}")
    try:
        return FaultRule(**item)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"rules[{index}]: {exc}") from None
