#!/bin/bash
# One sitting of the perftest figures (docs/PERFORMANCE.md, issue 10's
# speed goals): unmodified perftest through hcasim's libibverbs.so.1 beside
# hcasim perf --connect, against one daemon, alternating, ROUNDS rounds
# (default 3), then the medians and ratios. Run from the project root after
# `make` (bin/lib).
#   bash scripts/perf-perftest.sh
#   ROUNDS=5 POLL=0 bash scripts/perf-perftest.sh
set -euo pipefail
rounds=${ROUNDS:-3}
work=$(mktemp -d)
trap 'kill $srv 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
go build -o "$work/hcasim" ./cmd/hcasim
H="$work/hcasim"
[ -f bin/lib/libibverbs.so.1 ] || { echo "bin/lib/libibverbs.so.1 missing: run make"; exit 1; }
export LD_LIBRARY_PATH=$PWD/bin/lib HCASIM_SOCKET="$work/p.sock"
"$H" serve --socket "$HCASIM_SOCKET" --log-level warn --poll "${POLL:-50us}" >/dev/null 2>&1 &
srv=$!
for _ in $(seq 100); do [ -S "$HCASIM_SOCKET" ] && break; sleep 0.05; done
port=$((20000 + RANDOM % 20000))
# pt PROG ARGS...: one perftest run, server and client; prints the client's
# result line.
pt() {
  "$@" -d hcasim0 -p $port >"$work/srv.out" 2>&1 &
  local s=$!
  for _ in $(seq 200); do grep -q ":$(printf %04X $port) .* 0A " /proc/net/tcp 2>/dev/null && break; sleep 0.02; done
  "$@" -d hcasim0 -p $port 127.0.0.1 2>&1 | grep -A1 '#bytes' | tail -1
  wait $s || true
  port=$((port + 1))
}
perf() {
  "$H" perf write "$@" --duration 2s --connect "$HCASIM_SOCKET" --json 2>/dev/null
}
for i in $(seq "$rounds"); do
  perf --size 64 --qd 1 >"$work/p1.$i"
  perf --size 65536 >"$work/p2.$i"
  perf --size 64 --qd 32 >"$work/p3.$i"
  pt ib_write_lat -s 64 -n 10000 >"$work/t1.$i"
  pt ib_write_bw -s 65536 -n 20000 >"$work/t2.$i"
  pt ib_write_bw -s 64 -n 500000 >"$work/t3.$i"
done
python3 - "$work" "$rounds" <<'PY'
import json, statistics, sys
w, n = sys.argv[1], int(sys.argv[2])
def med(xs): return statistics.median(xs)
def perf(k, f): return [f(json.load(open(f"{w}/p{k}.{i}"))) for i in range(1, n + 1)]
def pt(k, col): return [float(open(f"{w}/t{k}.{i}").read().split()[col]) for i in range(1, n + 1)]
p50 = perf(1, lambda r: r["lat_us"]["p50"])
bw = perf(2, lambda r: r["gbytes_per_sec"])
rate = perf(3, lambda r: r["ops_per_sec"] / 1e6)
lat = pt(1, 4)                        # t_typical [usec]
tbw = [x * 1048576 / 1e9 for x in pt(2, 3)]    # BW average [MB/sec], MB = 2^20 bytes (perftest) -> GB/s
trate = pt(3, 4)                      # MsgRate [Mpps]
show = lambda xs: " ".join(f"{x:.2f}" for x in xs)
print(f"perf --connect write 64 B QD1 p50 us:   {show(p50)}  median {med(p50):.2f}")
print(f"ib_write_lat -s 64 t_typical us:        {show(lat)}  median {med(lat):.2f}  ratio {med(lat)/med(p50):.2f} (goal <= 2)")
print(f"perf --connect write 64 KiB GB/s:       {show(bw)}  median {med(bw):.2f}")
print(f"ib_write_bw -s 65536 BW average GB/s:   {show(tbw)}  median {med(tbw):.2f}  ratio {med(tbw)/med(bw):.2f} (goal >= 0.7)")
print(f"perf --connect write 64 B QD32 Mops/s:  {show(rate)}  median {med(rate):.2f}")
print(f"ib_write_bw -s 64 MsgRate Mpps:         {show(trate)}  median {med(trate):.2f}  ratio {med(trate)/med(rate):.2f} (goal >= 0.5)")
PY
