"""The README is a page a stranger reads in five minutes; its tables and links tell the truth."""

from __future__ import annotations

import re
import tomllib
import unicodedata
from pathlib import Path

import pytest

from se_exporter.cli import build_parser, subparser
from se_exporter.imds.impact import Cause, Impact
from se_exporter.lifecycle.transitions import TransitionKind
from tests.rules.promql import DESIGN_METRICS
from tests.support.readme import DOCS, README, REPO, code_blocks, marked, section

pytestmark = pytest.mark.pure

# README.md, docs/ and every other page a reader opens: the top level's, dashboards' and the runbook.
PAGES = [
    *sorted(REPO.glob("*.md")),
    *sorted(DOCS.glob("*.md")),
    REPO / "dashboards" / "README.md",
    REPO / "alerts" / "runbook.md",
]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def test_the_readme_fits_on_a_page() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 260, f"README has {len(lines)} lines; move the depth into docs/"


def test_the_readme_has_exactly_two_set_up_commands() -> None:
    blocks = code_blocks(section("Quick start"), "sh")
    assert len(blocks) == 2
    demo, test = (block.strip() for block in blocks)
    assert demo == (
        "python3 -m venv .venv && .venv/bin/pip install --require-hashes -r .ci/uv.txt && .venv/bin/uv sync --locked "
        "--inexact && .venv/bin/se-exporter demo"
    )
    assert test == marked(README, "test-command").strip()
    assert "prometheus prometheus-alertmanager" in test and test.endswith(
        ".venv/bin/python -m pytest --full --durations=30"
    )


def test_a_contributor_without_root_has_one_command_for_the_quick_tier() -> None:
    """docs/development.md's command: no sudo and no system package, the same Python packages as the README's
    test command (the lock's, by hash), then plain pytest (the quick tier); the README points to it."""
    contributor = marked(DOCS / "development.md", "contributor-command").strip()
    full = marked(README, "test-command").strip()
    assert "sudo" not in contributor and "apt-get" not in contributor and "$S" not in contributor
    python_part = full[full.index("python3 -m venv") : full.index(" && .venv/bin/python -m pytest")]
    assert contributor == f"{python_part} && .venv/bin/python -m pytest"
    assert "development.md#without-root-the-quick-tier" in README.read_text(encoding="utf-8")


def test_no_page_says_an_image_can_be_pulled() -> None:
    """Nothing is published yet: every page that names the registry says so, and none says otherwise."""
    for page in PAGES:
        text = " ".join(page.read_text(encoding="utf-8").split())
        if page.name == "CHANGELOG.md" or "ghcr.io/" not in text:
            continue
        assert re.search(r"[Nn]o (se-exporter )?image is published yet", text), page
        assert "are published as" not in text and "images are published" not in text, page


def anchors(page: Path) -> set[str]:
    """GitHub's anchors for the page's headings."""
    found = set()
    for heading in re.findall(r"^#+ (.+)$", page.read_text(encoding="utf-8"), flags=re.M):
        text = unicodedata.normalize("NFKD", heading).strip().lower()
        found.add(re.sub(r"[^\w\- ]", "", text).replace(" ", "-"))
    return found


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(REPO)) for p in PAGES])
def test_every_relative_link_resolves(page: Path) -> None:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    for target in LINK.findall(text):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        assert resolved.exists(), f"{page.name} links to {target}, which does not exist"
        if anchor and resolved.suffix == ".md":
            assert anchor in anchors(resolved), f"{page.name} links to {target}: no such heading"


def test_the_readme_links_into_every_docs_page() -> None:
    linked = set(LINK.findall(README.read_text(encoding="utf-8")))
    for page in sorted(DOCS.glob("*.md")):
        assert f"docs/{page.name}" in linked, f"the README does not link to docs/{page.name}"


def test_the_flags_table_is_the_exporters_flags() -> None:
    run = subparser(build_parser(("run",)), "run")
    flags = {flag.option for flag in run.flags} | {"--version"}
    table = set(re.findall(r"^\| `(--[\w.-]+)` \|", section("Configuration"), flags=re.M))
    assert table == flags


def test_the_metrics_table_is_the_contracts() -> None:
    table = section("Metrics")
    documented: set[str] = set()
    for cell in re.findall(r"^\| ([^|]+) \|", table, flags=re.M):
        documented.update("azure_scheduled_events_" + name for name in re.findall(r"`(\w+)`", cell))
    assert documented == set(DESIGN_METRICS)


ENV_ASSIGNMENT = re.compile(r"^[A-Z_][A-Z0-9_]*=")
COMMAND_SEPARATORS = frozenset({"&&", "||", ";", "|", "sudo", "exec"})


def _invocations(words: list[str]) -> list[int]:
    """Where a shell line runs se-exporter: a word ending in se-exporter in a command's position (first, or
    after a separator, sudo or variable assignments). Elsewhere it names a container, a release, a chart,
    a unit or a folder."""
    found = []
    for index, word in enumerate(words):
        before = index - 1
        while before >= 0 and ENV_ASSIGNMENT.match(words[before]):
            before -= 1
        if word.endswith("se-exporter") and (before < 0 or words[before] in COMMAND_SEPARATORS):
            found.append(index)
    return found


@pytest.mark.parametrize(
    ("line", "runs_at"),
    [
        ("se-exporter --state.file=x", [0]),
        ("/opt/se-exporter/bin/se-exporter --poll.interval=2s", [0]),
        ("OTEL_EXPORTER_OTLP_ENDPOINT=http://c:4318 se-exporter --state.file=x", [1]),
        ("python3 -m venv /opt/se-exporter && /opt/se-exporter/bin/se-exporter demo", [5]),
        ("sudo se-exporter check --approval.config=p.yaml", [1]),
        ("helm upgrade --install se-exporter deploy/helm/se-exporter --create-namespace", []),
        ("docker run -d --name se-exporter --restart unless-stopped", []),
        ("systemctl enable --now se-exporter", []),
    ],
)
def test_the_flag_check_finds_where_a_line_runs_the_exporter(line: str, runs_at: list[int]) -> None:
    assert _invocations(line.split()) == runs_at


def test_every_flag_the_docs_use_exists() -> None:
    parser = build_parser()
    known = {flag.option for sub in parser.commands.values() for flag in sub.flags}
    known |= {"--help", "--version", "-h"}
    for page in PAGES:
        for block in code_blocks(page.read_text(encoding="utf-8"), "sh"):
            for line in block.splitlines():
                words = line.split("#")[0].split()
                for start in _invocations(words):
                    used = {w.split("=")[0] for w in words[start + 1 :] if w.startswith("--")}
                    assert used <= known, f"{page.name}: {sorted(used - known)} in {line!r}"


def test_the_python_version_is_stated_where_installing_is_described() -> None:
    """Issue 40: Python >= 3.11 was required but said nowhere an installer reads (older distributions)."""
    requires = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["requires-python"]
    assert requires == ">=3.11"
    for page in (README, DOCS / "deploy.md", DOCS / "windows.md"):
        assert "Python 3.11 or later" in page.read_text(encoding="utf-8"), page
    deploy = (DOCS / "deploy.md").read_text(encoding="utf-8")
    assert "container image" in deploy.split("## systemd")[1].split("\n## ")[0], "the way for older distributions"


def test_the_readmes_vocabulary_names_every_transition_impact_and_cause() -> None:
    """Each name the demo shows within a minute is explained in the README, which links the one table in
    docs/design.md that gives each its line; both follow the code's own enumerations."""
    text = README.read_text(encoding="utf-8")
    vocabulary = text[text.index("<!-- vocabulary -->") : text.index("<!-- /vocabulary -->")]
    named = set(re.findall(r"`([a-z_]+)`", vocabulary))
    for enumeration in (TransitionKind, Impact, Cause):
        assert {member.value for member in enumeration} <= named, enumeration
    assert "docs/design.md#transitions" in vocabulary and "docs/design.md#impact-and-cause" in vocabulary
    design = (DOCS / "design.md").read_text(encoding="utf-8")
    for heading, enumeration in (("## Transitions", TransitionKind), ("## Impact and cause", Impact)):
        table = next(block for block in design[design.index(heading) :].split("\n\n") if block.startswith("|"))
        rows = re.findall(r"^\| `([a-z_]+)` \|", table.split("|---|", 1)[1], flags=re.M)  # below the header
        assert sorted(rows) == sorted(member.value for member in enumeration), heading
