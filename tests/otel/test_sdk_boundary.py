"""The developers' guide: only one module builds the OpenTelemetry SDK's providers (otel/pipeline.py, which
alone imports the experimental logs API too); the rest uses the stable API or plain data. Around it, the
modules that implement the SDK's exporter interface (otel/span_export.py) or watch the official exporters'
answers (otel/answers.py, otel/exporters.py: requests and grpc) import what that takes, and nothing more."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "se_exporter"
RESTRICTED = ("opentelemetry.sdk", "opentelemetry.exporter", "opentelemetry._logs", "grpc")
ALLOWED = {
    "otel/pipeline.py": RESTRICTED,
    "otel/span_export.py": ("opentelemetry.sdk.trace",),  # the SpanExporter interface it implements
    "otel/answers.py": ("grpc",),  # the client interceptor on the official gRPC exporter's channel
    "otel/exporters.py": ("grpc",),  # checked importable before the gRPC exporter is built
}
PROVIDERS = ("TracerProvider", "LoggerProvider", "MeterProvider")


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_only_the_otel_pipeline_imports_the_sdk() -> None:
    offenders = {
        name: sorted(
            m for m in imported_modules(path) if m.startswith(RESTRICTED) and not m.startswith(ALLOWED.get(name, ()))
        )
        for path in PACKAGE.rglob("*.py")
        if (name := path.relative_to(PACKAGE).as_posix())
    }
    assert {name: mods for name, mods in offenders.items() if mods} == {}


def test_only_the_otel_pipeline_builds_a_provider() -> None:
    builders = sorted(
        path.relative_to(PACKAGE).as_posix()
        for path in PACKAGE.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path)))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in PROVIDERS
    )
    assert set(builders) <= {"otel/pipeline.py"} and builders, builders
