#!/bin/bash
# One sitting of issue 13's figures (docs/PERFORMANCE.md): hcasim perf
# write in process and over the socket (--connect to hcasim serve), plain
# and with PI (128 KiB, QD 8, insert and pass at 4096- and 512-byte
# intervals) and the multi-QP scale rows; ROUNDS rounds alternating
# (default 3), medians. OLD=path/to/hcasim adds the same in-process rows
# for another build (an A/B in the same sitting). Run from the project root.
#   bash scripts/perf-engines.sh
#   OLD=/tmp/hcasim.old ROUNDS=5 bash scripts/perf-engines.sh
set -euo pipefail
rounds=${ROUNDS:-3}
dur=${DURATION:-2s}
work=$(mktemp -d)
trap 'kill $srv 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
go build -o "$work/hcasim" ./cmd/hcasim
H="$work/hcasim"
sock="$work/p.sock"
"$H" serve --socket "$sock" --log-level warn >/dev/null 2>&1 &
srv=$!
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.05; done
rows=(
  "--size 64 --qd 1"
  "--size 64 --qd 32"
  "--size 65536 --qd 8"
  "--size 131072 --qd 8"
  "--size 131072 --qd 8 --pi insert --interval 4096"
  "--size 131072 --qd 8 --pi pass --interval 4096"
  "--size 131072 --qd 8 --pi insert --interval 512"
  "--size 131072 --qd 8 --pi pass --interval 512"
  "--size 4096 --qd 32 --qps 1"
  "--size 4096 --qd 32 --qps 64"
)
for i in $(seq "$rounds"); do
  for r in "${rows[@]}"; do
    # shellcheck disable=SC2086
    echo "new|$r|$("$H" perf write $r --duration "$dur" --json 2>/dev/null)"
    if [ -n "${OLD:-}" ] && [[ $r != *--qps* ]]; then
      # shellcheck disable=SC2086
      echo "old|$r|$("$OLD" perf write $r --duration "$dur" --json 2>/dev/null)"
    fi
    if [[ $r != *--qps* ]]; then
      # shellcheck disable=SC2086
      echo "socket|$r|$("$H" perf write $r --duration "$dur" --connect "$sock" --json 2>/dev/null)"
    fi
  done
done >"$work/runs"
python3 - "$work/runs" <<'PY'
import json, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    who, row, js = line.rstrip("\n").split("|", 2)
    try:
        r = json.loads(js)
    except ValueError:
        continue
    runs.setdefault((row, who), []).append(r)
def med(rs, f):
    return statistics.median(f(r) for r in rs)
for row in dict.fromkeys(k[0] for k in runs):
    for who in ("old", "new", "socket"):
        rs = runs.get((row, who))
        if not rs:
            continue
        print(f"{who:6s} {row:48s} {med(rs, lambda r: r['ops_per_sec'])/1e6:8.3f} Mops/s "
              f"{med(rs, lambda r: r['gbytes_per_sec']):7.2f} GB/s  p50 {med(rs, lambda r: r['lat_us']['p50']):8.2f} us  (n={len(rs)})")
PY
