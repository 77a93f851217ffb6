#!/usr/bin/env bash
# What CI runs for the benchmark suite: the parser/report tests, then a --quick smoke of one
# scenario against spate alone (needs bench/setup first). Exit status non-zero on any failure.
set -euo pipefail
BENCH_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python3 -m pytest -q "$BENCH_DIR/tests"
out="$(mktemp -d)"
"$BENCH_DIR/run" --quick --scenarios S5 --servers spate --check --out "$out"
grep -q "^| 612 B" "$out/report.md"
# The smoke must measure spate, not report it as n/a.
if grep -q "n/a" <(grep "^| 612 B" "$out/report.md" | cut -d'|' -f4); then
    echo "ci: spate did not run S5:"; cat "$out/report.md"; exit 1
fi
echo "ci: bench ok ($out)"
