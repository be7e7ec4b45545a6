#!/bin/bash
# A fresh install of a wheel into a new venv, as a user's `pip install` does it (no pip cache): its time, the
# size of site-packages (pip's own included), the distributions installed, and whether grpcio came along.
# usage: benchmarks/fresh_install.sh WHEEL LABEL    (BENCHMARKS.md, "Fresh install")
set -euo pipefail
rm -rf /tmp/ib-venv
python3 -m venv /tmp/ib-venv
start=$(date +%s.%N)
/tmp/ib-venv/bin/pip install --no-cache-dir --quiet "$1" 2>/dev/null
end=$(date +%s.%N)
size=$(du -sm /tmp/ib-venv/lib/python3.11/site-packages | cut -f1)
count=$(/tmp/ib-venv/bin/pip list --format=freeze 2>/dev/null | grep -vc '^pip=\|^setuptools=')
grpc=$(/tmp/ib-venv/bin/pip list 2>/dev/null | grep -ci '^grpcio ' || true)
echo "$2 seconds=$(echo "$end - $start" | bc) site-packages_MiB=$size packages=$count grpcio=$grpc"
