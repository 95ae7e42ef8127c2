#!/bin/bash
# One sitting of the wire figures (docs/PERFORMANCE.md, issue 12's speed
# goals): hcasim perf --role server|client with both sides on one daemon,
# then with one side on each of two daemons talking RoCEv2 over loopback
# UDP (127.0.77.2 and 127.0.77.3), then the same with a pcap capture on the
# server's daemon; alternating, ROUNDS rounds (default 3); medians and
# ratios. Run from the project root. The capture goes to PCAP_DIR (default
# /dev/shm, memory: the figure is the capture path's cost, not the disk's).
#   bash scripts/perf-wire.sh
#   PCAP_DIR=/tmp ROUNDS=5 bash scripts/perf-wire.sh
set -euo pipefail
rounds=${ROUNDS:-3}
dur=${DURATION:-2s}
work=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
go build -o "$work/hcasim" ./cmd/hcasim
H="$work/hcasim"
daemon() { # daemon NAME ARGS...
  "$H" serve --socket "$work/$1.sock" --log-level warn "${@:2}" >/dev/null 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do [ -S "$work/$1.sock" ] && break; sleep 0.05; done
}
daemon one
daemon a --roce 127.0.77.2
daemon b --roce 127.0.77.3
pcapdir=$(mktemp -d -p "${PCAP_DIR:-/dev/shm}")
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; rm -rf "$work" "$pcapdir"' EXIT
daemon pa --roce 127.0.78.2 --pcap "$pcapdir/a.pcap"
daemon pb --roce 127.0.78.3
# run SERVER_SOCK CLIENT_SOCK SIZE QD: the client's ops/s
run() {
  "$H" perf write --connect "$work/$1.sock" --role server --peer "$work/perf.sock" >/dev/null 2>&1 &
  local s=$!
  "$H" perf write --size "$3" --qd "$4" --duration "$dur" --connect "$work/$2.sock" --role client --peer "$work/perf.sock" --json |
    sed -n 's/.*"ops_per_sec":\([0-9.e+]*\).*/\1/p'
  wait $s || true
  : >"$pcapdir/a.pcap" # keep the capture from filling its file system
}
med() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
for cfg in "65536 8" "64 32"; do
  set -- $cfg
  for r in $(seq "$rounds"); do
    echo "$(run one one "$1" "$2")" >>"$work/one.$1"
    echo "$(run a b "$1" "$2")" >>"$work/wire.$1"
    echo "$(run pa pb "$1" "$2")" >>"$work/pcap.$1"
  done
  one=$(med <"$work/one.$1"); wire=$(med <"$work/wire.$1"); pcap=$(med <"$work/pcap.$1")
  printf 'write %6d B QD %2d: one daemon %10.0f ops/s, two daemons %9.0f ops/s (%.3f×), with pcap %9.0f ops/s (%.2f× of without)\n' \
    "$1" "$2" "$one" "$wire" "$(echo "$wire / $one" | bc -l)" "$pcap" "$(echo "$pcap / $wire" | bc -l)"
done
