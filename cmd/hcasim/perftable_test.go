package main

import (
	"bufio"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// perfTableOut is perf's human-readable table: its column line and the
// rows under it, each split into numbers.
type perfTableOut struct {
	header string
	rows   [][]float64
}

// parsePerfTable finds the table in out: the line starting with
// " #bytes" and the rows up to the closing rule.
func parsePerfTable(t *testing.T, out string) perfTableOut {
	t.Helper()
	var tab perfTableOut
	in := false
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, " #bytes"):
			require.False(t, in, "two column lines in\n%s", out)
			tab.header, in = line, true
		case in && line == perfRule:
			return tab
		case in:
			var row []float64
			for _, f := range strings.Fields(line) {
				v, err := strconv.ParseFloat(f, 64)
				require.NoError(t, err, "row %q", line)
				row = append(row, v)
			}
			tab.rows = append(tab.rows, row)
		}
	}
	require.Fail(t, "no table", "stdout:\n%s", out)
	return tab
}

// perfJSONRow is the part of perf's --json object these tests read.
type perfJSONRow struct {
	Op           string  `json:"op"`
	Mode         string  `json:"mode"`
	Size         int     `json:"size"`
	QD           int     `json:"qd"`
	PI           string  `json:"pi"`
	Iterations   int     `json:"iterations"`
	OpsPerSec    float64 `json:"ops_per_sec"`
	GBytesPerSec float64 `json:"gbytes_per_sec"`
	MBPerSec     float64 `json:"mbytes_per_sec"`
	Mpps         float64 `json:"mpps"`
	Lat          struct {
		P50     float64 `json:"p50"`
		P99     float64 `json:"p99"`
		Min     float64 `json:"min"`
		Max     float64 `json:"max"`
		Avg     float64 `json:"avg"`
		Stdev   float64 `json:"stdev"`
		P999    float64 `json:"p99_9"`
		Samples int     `json:"samples"`
	} `json:"lat_us"`
}

// parsePerfJSON reads perf's --json output: one object a line.
func parsePerfJSON(t *testing.T, out string) []perfJSONRow {
	t.Helper()
	var rows []perfJSONRow
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var r perfJSONRow
		require.NoError(t, json.Unmarshal([]byte(line), &r), "line %q", line)
		rows = append(rows, r)
	}
	return rows
}

// The bandwidth table has perftest's columns and numbers that agree with
// each other and the run's length.
func TestPerfTableColumns(t *testing.T) {
	const size = 4096
	code, out, errOut := runCLI("perf", "write", "--size", strconv.Itoa(size), "--qd", "8", "--duration", "100ms")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "RDMA_Write BW Test")
	assert.Contains(t, out, "TX depth : 8")
	tab := parsePerfTable(t, out)
	assert.Equal(t, []string{"#bytes", "#iterations", "BW", "average[MB/sec]", "MsgRate[Mpps]", "p50[usec]", "p99[usec]"}, strings.Fields(tab.header))
	require.Len(t, tab.rows, 1)
	row := tab.rows[0]
	require.Len(t, row, 6, "row %v", row)
	bytes, iters, mbs, mpps, p50, p99 := row[0], row[1], row[2], row[3], row[4], row[5]
	assert.Equal(t, float64(size), bytes)
	assert.Greater(t, iters, 100.0, "a 100ms run completes more than 100 operations")
	assert.Greater(t, mpps, 0.0)
	// MB are perftest's, 2^20 bytes: BW = MsgRate * size.
	assert.InEpsilon(t, mpps*1e6*size/(1<<20), mbs, 0.01, "BW average %v MB/s at %v Mpps", mbs, mpps)
	// The operations over the run's length: 100ms, plus the last ones'
	// drain and whatever a loaded machine adds.
	assert.GreaterOrEqual(t, iters, mpps*1e6*0.1*0.99, "%v operations at %v Mpps in 100ms", iters, mpps)
	assert.LessOrEqual(t, iters, mpps*1e6*0.1*2, "%v operations at %v Mpps in 100ms", iters, mpps)
	assert.Greater(t, p50, 0.0)
	assert.LessOrEqual(t, p50, p99)

	// --json carries the same figures, besides the fields scripts read.
	code, out, errOut = runCLI("perf", "send", "--size", strconv.Itoa(size), "--qd", "8", "--duration", "100ms", "--json")
	require.Equal(t, 0, code, errOut)
	rows := parsePerfJSON(t, out)
	require.Len(t, rows, 1)
	r := rows[0]
	assert.Equal(t, "send", r.Op)
	assert.Equal(t, "bw", r.Mode)
	assert.Greater(t, r.Iterations, 100)
	assert.InEpsilon(t, r.OpsPerSec/1e6, r.Mpps, 1e-9)
	assert.InEpsilon(t, r.OpsPerSec*size/(1<<20), r.MBPerSec, 1e-9)
	assert.InEpsilon(t, r.OpsPerSec*size/1e9, r.GBytesPerSec, 1e-9)
	assert.Equal(t, r.Iterations, r.Lat.Samples)
	assert.LessOrEqual(t, r.Lat.P50, r.Lat.P99)
}

// checkLatOrder checks ib_write_lat's figures are ordered.
func checkLatOrder(t *testing.T, min, typical, avg, p99, p999, max, stdev float64) {
	t.Helper()
	assert.Greater(t, min, 0.0)
	assert.LessOrEqual(t, min, typical)
	assert.LessOrEqual(t, typical, p99)
	assert.LessOrEqual(t, p99, p999)
	assert.LessOrEqual(t, p999, max)
	assert.LessOrEqual(t, min, avg)
	assert.LessOrEqual(t, avg, max)
	assert.GreaterOrEqual(t, stdev, 0.0)
}

// --lat is ib_write_lat's table at QD 1, its statistics ordered; --json
// carries them.
func TestPerfLat(t *testing.T) {
	code, out, errOut := runCLI("perf", "write", "--lat", "--size", "64", "--duration", "100ms")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "RDMA_Write Latency Test")
	assert.Contains(t, out, "TX depth : 1")
	tab := parsePerfTable(t, out)
	for _, col := range []string{"#bytes", "#iterations", "t_min[usec]", "t_max[usec]", "t_typical[usec]", "t_avg[usec]",
		"t_stdev[usec]", "99% percentile[usec]", "99.9% percentile[usec]"} {
		assert.Contains(t, tab.header, col)
	}
	require.Len(t, tab.rows, 1)
	row := tab.rows[0]
	require.Len(t, row, 9, "row %v", row)
	assert.Equal(t, 64.0, row[0])
	assert.Greater(t, row[1], 100.0)
	// min, max, typical, avg, stdev, 99%, 99.9%
	checkLatOrder(t, row[2], row[4], row[5], row[7], row[8], row[3], row[6])

	for _, op := range []string{"write", "read", "send"} {
		code, out, errOut := runCLI("perf", op, "--lat", "--qd", "1", "--size", "512", "--duration", "100ms", "--json")
		require.Equal(t, 0, code, errOut)
		rows := parsePerfJSON(t, out)
		require.Len(t, rows, 1)
		r := rows[0]
		assert.Equal(t, op, r.Op)
		assert.Equal(t, "lat", r.Mode)
		assert.Equal(t, 1, r.QD)
		assert.Equal(t, 512, r.Size)
		assert.Greater(t, r.Iterations, 100)
		assert.Equal(t, r.Iterations, r.Lat.Samples, "every operation's latency is a sample")
		l := r.Lat
		checkLatOrder(t, l.Min, l.P50, l.Avg, l.P99, l.P999, l.Max, l.Stdev)
		// At QD 1 one operation at a time: the rate is about one over the
		// mean latency (the loop's own time besides).
		assert.LessOrEqual(t, r.OpsPerSec, 1e6/l.Avg*1.01, "%v ops/s with a mean of %v µs", r.OpsPerSec, l.Avg)
	}
}

// -a is one row per size, 2 up to 8 MiB in order (with --pi from the
// interval); with --json one line per size.
func TestPerfSweep(t *testing.T) {
	var want []float64
	for s := 2; s <= 8<<20; s *= 2 {
		want = append(want, float64(s))
	}
	require.Len(t, want, 23)
	code, out, errOut := runCLI("perf", "write", "-a", "--qd", "4", "--duration", "10ms")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "Duration : 10ms per size")
	tab := parsePerfTable(t, out)
	require.Len(t, tab.rows, len(want))
	for i, row := range tab.rows {
		require.Len(t, row, 6)
		assert.Equal(t, want[i], row[0], "row %d", i)
		assert.Greater(t, row[1], 0.0, "size %v: operations", row[0])
		assert.Greater(t, row[2], 0.0, "size %v: MB/s", row[0])
	}
	// The progress is on standard error: standard output is the table.
	assert.NotContains(t, out, "ops/s")

	code, out, errOut = runCLI("perf", "read", "--all", "--lat", "--pi", "insert", "--interval", "512", "--duration", "10ms", "--json")
	require.Equal(t, 0, code, errOut)
	rows := parsePerfJSON(t, out)
	var sizes []int
	for _, r := range rows {
		sizes = append(sizes, r.Size)
		assert.Equal(t, "lat", r.Mode)
		assert.Equal(t, "insert", r.PI)
		assert.Greater(t, r.Iterations, 0, "size %d", r.Size)
		checkLatOrder(t, r.Lat.Min, r.Lat.P50, r.Lat.Avg, r.Lat.P99, r.Lat.P999, r.Lat.Max, r.Lat.Stdev)
	}
	var wantPI []int
	for s := 512; s <= 8<<20; s *= 2 {
		wantPI = append(wantPI, s)
	}
	assert.Equal(t, wantPI, sizes)
}

// Flags that do not go together are usage errors (exit 2, nothing on
// standard output).
func TestPerfTableUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"write", "--lat", "--qd", "4"}, "--lat runs at QD 1"},
		{[]string{"write", "--qd", "32", "--lat"}, "--qd 32 does not go with it"},
		{[]string{"write", "--lat", "--qps", "2"}, "--lat measures one QP pair"},
		{[]string{"write", "-a", "--size", "64"}, "-a sweeps the sizes itself"},
		{[]string{"read", "--size", "4096", "--all"}, "-a sweeps the sizes itself"},
		{[]string{"write", "-a", "--role", "client", "--connect", "x.sock"}, "-a works with --role both"},
		{[]string{"write", "-a", "--duration", "0s"}, "--duration 0s: want a positive duration"},
		{[]string{"send", "-a", "--pi", "insert"}, "--pi insert works with write and read, not send"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, out, errOut := runCLI(append([]string{"perf"}, tc.args...)...)
			assert.Equal(t, 2, code)
			assert.Empty(t, out)
			assert.Contains(t, errOut, tc.want)
			assert.Contains(t, errOut, "Run 'hcasim help perf'")
		})
	}
	// --qd 1 is --lat's own depth.
	code, _, errOut := runCLI("perf", "write", "--lat", "--qd", "1", "--duration", "20ms")
	assert.Equal(t, 0, code, errOut)
}
