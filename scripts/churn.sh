#!/usr/bin/env bash
# churn.sh: the churn soak of docs/PERFORMANCE.md ("Reliability under
# churn"): ibverbs' TestChurn run for longer, on one daemon and then on
# two RoCE daemons with 1% loss and 1% reorder, and its figures printed.
# Each part churns for --duration (default 10m); every --settle (default
# 1m) the churn pauses, every pair ends, and the daemon must be back at
# its baseline. Needs what make test needs (rdmacm-utils, perftest,
# libibverbs-dev) and bin/hcasim (make build).
#
#   scripts/churn.sh [--duration 10m] [--settle 1m]
set -euo pipefail
dur=10m
settle=1m
while [ $# -gt 0 ]; do
	case "$1" in
	--duration) dur="$2"; shift 2 ;;
	--settle) settle="$2"; shift 2 ;;
	*) echo "usage: $0 [--duration D] [--settle D]" >&2; exit 2 ;;
	esac
done
cd "$(dirname "$0")/.."
make -s build
log=$(mktemp)
trap 'rm -f "$log"' EXIT
echo "churn: $dur on each of one daemon and two RoCE daemons (loss 1%, reorder 1%), settling every $settle"
rc=0
HCASIM_REQUIRE_FRONTEND=1 go test -count=1 -run 'TestChurn$' -v -timeout 0 ./ibverbs/ \
	-churn "$dur" -churn.settle "$settle" >"$log" 2>&1 || rc=$?
grep -E '^=== RUN   TestChurn/|churn: |--- (PASS|FAIL)' "$log" | sed 's/^ *churn_test.go:[0-9]*: //'
if [ $rc -ne 0 ]; then
	echo "churn: FAILED (go test exit $rc); the log:" >&2
	grep -v '^=== ' "$log" | tail -50 >&2
fi
exit $rc
