"""What the exporter imports beyond the script (reference_stack.py), and what it adds to resident memory.

Both run for a few seconds with OpenTelemetry on (a dead endpoint; off with ``--otel-off``) under
``-X importtime`` against an idle simulator: the modules each loads. Then, in one fresh interpreter, every
module the script loads is imported, and the exporter's other modules after them, grouped by package
(``se_exporter.<stage>`` for ours, after the libraries), VmRSS read after each group. Page-granular and
order-dependent: a map of where the memory goes, not a ledger.

    .venv/bin/python -m benchmarks.stack_imports [--otel-off]
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time

from benchmarks.common import REPO, clean_env, simulator

SECONDS = 6.0
DEAD_OTEL = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}
IMPORTED = re.compile(r"import time:\s+\d+ \|\s+\d+ \|\s*(\S+)")
MEASURE = """
import importlib, json, sys
def rss():
    with open('/proc/self/status') as status:
        return next(int(line.split()[1]) for line in status if line.startswith('VmRSS'))
script, groups = json.loads(sys.stdin.read())
bare = rss()
for name in script:
    try:
        importlib.import_module(name)
    except Exception:
        pass
after_script = rss()
added, last = [], after_script
for group, names in groups:
    for name in names:
        try:
            importlib.import_module(name)
        except Exception:
            pass
    added.append((group, len(names), rss() - last))
    last = rss()
print(json.dumps({"bare": bare, "script": after_script, "exporter": last, "groups": added}))
"""


def environment() -> dict[str, str]:
    """OTel on (a dead endpoint), or off with ``--otel-off`` (then neither side imports the SDK)."""
    return clean_env() if "--otel-off" in sys.argv else clean_env(DEAD_OTEL, otel=True)


def modules_of(argv: list[str]) -> list[str]:
    """The modules a command imports in its first seconds, in order."""
    env = environment()
    process = subprocess.Popen(
        [sys.executable, "-X", "importtime", *argv],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    time.sleep(SECONDS)
    process.terminate()
    _, err = process.communicate(timeout=10)
    return [match.group(1) for line in err.splitlines() if (match := IMPORTED.match(line))]


def group_of(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "se_exporter" else parts[0]


def main() -> None:
    with simulator(0) as sim:
        exporter = modules_of(["-m", "se_exporter", "run", "--web.listen-address=127.0.0.1:0", f"--imds.url={sim.url}"])
        script = modules_of([str(REPO / "benchmarks" / "reference_stack.py"), sim.url, "--port=0"])
    known = set(script)
    groups: dict[str, list[str]] = {}
    for module in exporter:
        if module not in known:
            groups.setdefault(group_of(module), []).append(module)
    # The libraries first, each a group of its own, then our stages: a stage imported first would be charged
    # with the libraries it imports.
    ordered = sorted(groups.items(), key=lambda group: group[0].startswith("se_exporter"))
    measured = subprocess.run(
        [sys.executable, "-c", MEASURE],
        input=json.dumps([script, ordered]),
        capture_output=True,
        text=True,
        env=environment(),
        check=True,
    )
    figures = json.loads(measured.stdout)
    print(f"script: {len(script)} modules; exporter: {len(exporter)}, of which {sum(map(len, groups.values()))} more")
    print(
        f"VmRSS: bare {figures['bare']} KiB, after the script's imports {figures['script']} KiB, after the "
        f"exporter's too {figures['exporter']} KiB (+{figures['exporter'] - figures['script']} KiB)\n"
    )
    print("| what the exporter adds over the script | modules | KiB |\n|---|---|---|")
    for group, count, kib in sorted(figures["groups"], key=lambda row: -row[2]):
        if kib:
            print(f"| {group} | {count} | {kib} |")


if __name__ == "__main__":
    main()
