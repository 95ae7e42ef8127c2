#!/bin/bash
# One sitting of the socket perf figures (docs/PERFORMANCE.md): the daemon
# (hcasim serve) and hcasim perf --connect, beside in-process hcasim perf,
# alternating, ROUNDS rounds (default 3). Run from the project root.
#   bash scripts/perf-socket.sh            # 3 rounds
#   ROUNDS=5 POLL=0 bash scripts/perf-socket.sh
set -euo pipefail
rounds=${ROUNDS:-3}
dur=${DURATION:-2s}
work=$(mktemp -d)
trap 'kill $srv 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
go build -o "$work/hcasim" ./cmd/hcasim
H="$work/hcasim"
sock="$work/p.sock"
"$H" serve --socket "$sock" --log-level warn --poll "${POLL:-50us}" >/dev/null 2>&1 &
srv=$!
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.05; done
show() {
  python3 -c '
import json, sys
r = json.load(sys.stdin)
print("%-7s %6d B QD %-3d %10.0f ops/s %7.2f GB/s  p50 %7.2f us  p99 %8.1f us" % (sys.argv[1], r["size"], r["qd"], r["ops_per_sec"], r["gbytes_per_sec"], r["lat_us"]["p50"], r["lat_us"]["p99"]))' "$1"
}
for i in $(seq "$rounds"); do
  echo "round $i"
  for a in "--size 64 --qd 32" "--size 64 --qd 1" "--size 65536 --qd 8"; do
    # shellcheck disable=SC2086
    "$H" perf write $a --duration "$dur" --connect "$sock" --json 2>/dev/null | show socket
    # shellcheck disable=SC2086
    "$H" perf write $a --duration "$dur" --json 2>/dev/null | show inproc
  done
done
