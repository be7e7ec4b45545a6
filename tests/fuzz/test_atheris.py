"""Runs each atheris target for a bounded number of inputs (skipped when atheris is not installed).

Seeds: the IMDS documents, policies and web configs under tests/testdata, and for the document target
every document the simulator serves while playing its scenarios (tests/fuzz/documents.py), so libFuzzer
starts from real inputs. A crash fails the test with libFuzzer's report; the crashing input is kept in
tmp_path.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RUNS = 8000
# Edges of every module the target instruments: 280 from the seeds alone (393 while /metrics was written by
# prometheus_client, whose exposition code was instrumented too; our own writer has fewer branches).
MIN_DOCUMENT_EDGES = 250
SEEDS = {
    "document": ["tests/testdata/imds/*.json", "tests/testdata/imds/malformed/*"],
    "policy": ["tests/testdata/approval/valid/*", "tests/testdata/approval/invalid/*"],
    "web_config": ["tests/testdata/web/good/*.yml", "tests/testdata/web/bad/*.yml"],
    "state": [],
}

pytestmark = [
    pytest.mark.skipif(
        importlib.util.find_spec("atheris") is None,
        reason="atheris is not installed (pip install atheris; see the test extras)",
    ),
    pytest.mark.posix,
    pytest.mark.full,
]


@pytest.mark.parametrize("target", sorted(SEEDS))
def test_atheris_target(target: str, tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for pattern in SEEDS[target]:
        for seed in REPO.glob(pattern):
            if seed.is_file():
                shutil.copy(seed, corpus / seed.name)
    if target == "document":
        from tests.fuzz.documents import write_corpus

        write_corpus(corpus)
    command = [
        sys.executable,
        "-m",
        "tests.fuzz.atheris_fuzz",
        target,
        f"-runs={RUNS}",
        "-seed=1",
        f"-artifact_prefix={tmp_path}/",
        "-max_len=4096",
        "-rss_limit_mb=1024",
        str(corpus),
    ]
    env = {**os.environ, "TMPDIR": str(tmp_path)}  # the state target's file, and anything else it makes
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False)
    report = done.stderr[-4000:]
    assert done.returncode == 0, f"atheris found a crash in {target}:\n{report}"
    # libFuzzer checks -runs only between batches of mutations, so it may stop a few runs past RUNS.
    finished = re.search(r"^Done (\d+) runs", done.stderr, re.MULTILINE)
    assert finished is not None, f"libFuzzer did not finish {target}:\n{report}"
    assert int(finished.group(1)) >= RUNS, report
    if target == "document":  # the seeds and the JSON mutator reach the parser's branches (bytes alone: 8 edges)
        edges = re.search(r"DONE +cov: (\d+)", done.stderr)
        assert edges is not None and int(edges.group(1)) >= MIN_DOCUMENT_EDGES, report
