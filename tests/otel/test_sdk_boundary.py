"""The developers' guide: only otel/pipeline.py imports the OpenTelemetry SDK, the OTLP exporters and the
experimental logs API (and only otel/otlp_grpc.py grpc); everything else uses the stable API or plain data."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "se_exporter"
RESTRICTED = ("opentelemetry.sdk", "opentelemetry.exporter", "opentelemetry._logs", "grpc")


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


ALLOWED = {"otel/pipeline.py": RESTRICTED, "otel/otlp_grpc.py": ("grpc",)}  # grpc: the [grpc] extra's client


def test_only_the_otel_pipeline_imports_the_sdk() -> None:
    offenders = {
        name: sorted(
            m for m in imported_modules(path) if m.startswith(RESTRICTED) and not m.startswith(ALLOWED.get(name, ()))
        )
        for path in PACKAGE.rglob("*.py")
        if (name := path.relative_to(PACKAGE).as_posix())
    }
    assert {name: mods for name, mods in offenders.items() if mods} == {}
