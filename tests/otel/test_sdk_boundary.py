"""The developers' guide: only one module builds the OpenTelemetry SDK's providers (otel/pipeline.py, which
also implements the SDK's exporter interface and builds the exporters, and alone imports the experimental
logs API); the rest uses the stable API or plain data, but the module that watches the official exporters'
answers (otel/answers.py: requests and grpc), which imports what that takes, and nothing more."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "se_exporter"
RESTRICTED = ("opentelemetry.sdk", "opentelemetry.exporter", "opentelemetry._logs", "grpc")
ALLOWED = {
    "otel/pipeline.py": RESTRICTED,
    "otel/answers.py": ("grpc",),  # the client interceptor on the official gRPC exporter's channel
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
