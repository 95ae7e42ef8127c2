package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func runCLI(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = run(args, &o, &e)
	return code, o.String(), e.String()
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"conform", "--help"}, {"speed", "--help"}, {"speed", "-h"}} {
		code, out, _ := runCLI(args...)
		if code != 0 || !strings.Contains(out, "usage: hcasim") || !strings.Contains(out, "example: hcasim") {
			t.Errorf("%v: exit %d, output %q: want exit 0 with a usage line and an example", args, code, out)
		}
	}
}

func TestErrorsGoToStderr(t *testing.T) {
	for _, args := range [][]string{{}, {"nosuch"}, {"conform"}, {"conform", "/nonexistent"}, {"speed", "extra"}, {"conform", "--bogus"}} {
		code, out, errOut := runCLI(args...)
		if code == 0 || errOut == "" || strings.Contains(out, "error") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q: want non-zero exit and a message on stderr", args, code, out, errOut)
		}
	}
}

func TestConformVectors(t *testing.T) {
	code, out, errOut := runCLI("conform", "../../testvectors")
	if code != 0 || errOut != "" {
		t.Fatalf("exit %d, stderr %q, output tail %q", code, errOut, tail(out))
	}
	if !regexpLine(out, " passed, 0 failed") {
		t.Fatalf("no summary line in %q", tail(out))
	}
}

func TestConformFailuresAndMalformed(t *testing.T) {
	dir := t.TempDir()
	good, err := os.ReadFile("../../testvectors/public.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitN(string(good), "\n", 3)
	// A case whose expected value is wrong fails with its id and what differed.
	bad := strings.Replace(lines[0], `"value":"0xd0db"`, `"value":"0xd0dc"`, 1)
	if bad == lines[0] {
		t.Fatal("first public case changed; update the test")
	}
	f1 := filepath.Join(dir, "bad.jsonl")
	os.WriteFile(f1, []byte(lines[1]+"\n"+bad+"\n"), 0o644)
	code, out, _ := runCLI("conform", f1)
	if code == 0 || !strings.Contains(out, "FAIL pub-0001") || !strings.Contains(out, "value: got 0xd0db, want 0xd0dc") ||
		!strings.Contains(out, "1 passed, 1 failed") {
		t.Errorf("failing case: exit %d, output %q", code, out)
	}
	// -v prints passing cases too.
	_, out, _ = runCLI("conform", "-v", f1)
	if !strings.Contains(out, "ok   pub-0002") {
		t.Errorf("-v: output %q", out)
	}
	// A malformed line is reported with its line number.
	f2 := filepath.Join(dir, "malformed.jsonl")
	os.WriteFile(f2, []byte(lines[1]+"\n{\"id\": 5}\n"), 0o644)
	code, _, errOut := runCLI("conform", f2)
	if code == 0 || !strings.Contains(errOut, "malformed.jsonl:2:") {
		t.Errorf("malformed file: exit %d, stderr %q", code, errOut)
	}
}

func TestSpeedJSON(t *testing.T) {
	code, out, errOut := runCLI("speed", "--json", "--runs", "1", "--time", "1ms", "--filter", "/4096/")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	var rows []struct {
		Kernel   string   `json:"kernel"`
		Impl     string   `json:"impl"`
		Size     int      `json:"size"`
		Interval *int     `json:"interval"`
		GBps     *float64 `json:"gbps"`
	}
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("stdout is not a JSON array: %v\n%s", err, out)
	}
	kernels := map[string]bool{}
	for _, r := range rows {
		kernels[r.Kernel] = true
		if r.Size != 4096 || r.Impl == "" || r.Interval == nil || r.GBps == nil || *r.GBps <= 0 {
			t.Errorf("bad row %+v", r)
		}
	}
	for _, k := range []string{"crc16", "crc64nvme", "crc32c", "ipcsum", "insert", "verify", "strip"} {
		if !kernels[k] {
			t.Errorf("no %s row", k)
		}
	}
}

func tail(s string) string {
	if len(s) > 300 {
		return s[len(s)-300:]
	}
	return s
}

func regexpLine(out, suffix string) bool {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasSuffix(l, suffix) {
			return true
		}
	}
	return false
}

func TestPerfJSON(t *testing.T) {
	for _, op := range []string{"write", "read", "send"} {
		code, out, errOut := runCLI("perf", op, "--size", "128", "--qd", "4", "--duration", "200ms", "--json")
		if code != 0 {
			t.Fatalf("%s: exit %d, stderr %q", op, code, errOut)
		}
		var r struct {
			Op           string   `json:"op"`
			Size         int      `json:"size"`
			QD           int      `json:"qd"`
			PI           string   `json:"pi"`
			OpsPerSec    *float64 `json:"ops_per_sec"`
			GBytesPerSec *float64 `json:"gbytes_per_sec"`
			Lat          *struct {
				P50 *float64 `json:"p50"`
				P99 *float64 `json:"p99"`
			} `json:"lat_us"`
		}
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("%s: stdout is not one JSON object: %v\n%s", op, err, out)
		}
		if r.Op != op || r.Size != 128 || r.QD != 4 || r.PI != "none" || r.OpsPerSec == nil || *r.OpsPerSec <= 0 ||
			r.GBytesPerSec == nil || r.Lat == nil || r.Lat.P50 == nil || r.Lat.P99 == nil || *r.Lat.P50 <= 0 {
			t.Fatalf("%s: %s", op, out)
		}
	}
	if code, _, _ := runCLI("perf", "teleport"); code == 0 {
		t.Fatal("unknown operation accepted")
	}
}

func TestDemo(t *testing.T) {
	code, out, errOut := runCLI("demo")
	if code != 0 || errOut != "" {
		t.Fatalf("exit %d, stderr %q, output tail %q", code, errOut, tail(out))
	}
	for _, want := range []string{"REG_MR_INTEGRITY", "the stream equals t10dif's INSERT", "IB_SIG_BAD_GUARD at offset 2600", "exit 0"} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q", want)
		}
	}
}
