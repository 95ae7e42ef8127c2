package ibverbs_test

import (
	"bufio"
	"compress/gzip"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hcasim/hcasim/internal/frontendtest"
)

var update = flag.Bool("update", false, "rewrite testdata/pyverbs.txt from this run's pyverbs results")

// The installed rdma-core tests (Debian's python3-pyverbs); some files are
// gzipped.
const pyverbsTests = "/usr/share/doc/rdma-core/tests"

// pyResult is one test's outcome.
type pyResult struct {
	ID      string // module.Class.test
	Outcome string // pass, skip, fail (FAIL or ERROR)
	Reason  string // the skip reason, or why a failure is expected
}

var (
	pyTestLine = regexp.MustCompile(`^(\w+) \((tests\.[\w.]+)\)(?: \.\.\. (.*))?$`)
	pyOutcome  = regexp.MustCompile(`(?:^| \.\.\. )(ok|skipped .*|ERROR|FAIL|expected failure|unexpected success)$`)
)

// parsePyverbs reads unittest's verbose output.
func parsePyverbs(r io.Reader) map[string]pyResult {
	res := map[string]pyResult{}
	cur := ""
	set := func(id, o string) {
		p := pyResult{ID: strings.TrimPrefix(id, "tests.")}
		switch {
		case o == "ok" || o == "expected failure":
			p.Outcome = "pass"
		case strings.HasPrefix(o, "skipped "):
			p.Outcome = "skip"
			p.Reason = strings.Trim(strings.TrimPrefix(o, "skipped "), `'"`)
		default:
			p.Outcome = "fail"
		}
		res[p.ID] = p
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		// A test's line is "name (id) ... OUTCOME", or its description
		// and outcome follow on later lines; what the test prints meanwhile
		// can come between, the outcome then starting a line.
		if m := pyTestLine.FindStringSubmatch(l); m != nil {
			cur = m[2]
			if o := pyOutcome.FindStringSubmatch(m[3]); o != nil {
				set(cur, o[1])
				cur = ""
			}
			continue
		}
		if m := pyOutcome.FindStringSubmatch(l); m != nil && cur != "" {
			set(cur, m[1])
			cur = ""
		}
	}
	return res
}

// readExpected reads testdata/pyverbs.txt: "OUTCOME ID # reason" lines.
func readExpected(t *testing.T) map[string]pyResult {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "pyverbs.txt"))
	if err != nil {
		t.Fatal(err)
	}
	exp := map[string]pyResult{}
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		rest, reason, _ := strings.Cut(l, " # ")
		f := strings.Fields(rest)
		if len(f) != 2 {
			t.Fatalf("testdata/pyverbs.txt: bad line %q", l)
		}
		exp[f[1]] = pyResult{ID: f[1], Outcome: f[0], Reason: reason}
	}
	return exp
}

// copyTests copies the installed tests into dir, gunzipping the gzipped
// ones: they are run from there and not kept.
func copyTests(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(pyverbsTests)
	if err != nil {
		frontendtest.Missing(t, "%s: %v: install python3-pyverbs", pyverbsTests, err)
	}
	dst := filepath.Join(dir, "tests")
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		in, err := os.Open(filepath.Join(pyverbsTests, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		var r io.Reader = in
		name := e.Name()
		if strings.HasSuffix(name, ".gz") {
			z, err := gzip.NewReader(in)
			if err != nil {
				t.Fatal(err)
			}
			r, name = z, strings.TrimSuffix(name, ".gz")
		}
		out, err := os.Create(filepath.Join(dst, name))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(out, r); err != nil {
			t.Fatal(err)
		}
		out.Close()
		in.Close()
	}
}

// fakeSysfs mounts, in the caller's mount namespace, a tmpfs over
// /sys/class with hcasim0's net interface lo.
const fakeSysfs = "mount -t tmpfs hcasim /sys/class && mkdir -p /sys/class/infiniband/hcasim0/device/net/lo"

// netSysfs reports whether the suite can run with fakeSysfs: unshare
// exists and may make a mount namespace here (root with CAP_SYS_ADMIN).
func netSysfs() bool {
	if _, err := exec.LookPath("unshare"); err != nil {
		return false
	}
	return exec.Command("unshare", "-m", "sh", "-c", fakeSysfs).Run() == nil
}

// TestPyverbs runs rdma-core's own test suite, as Debian installs it, on
// hcasim: /usr/bin/python3 tests/run_tests.py -v. Every test listed as
// pass in testdata/pyverbs.txt must pass and none may fail that is not
// listed as fail; skips are what hardware without a feature gives.
// -update rewrites the list from the run.
func TestPyverbs(t *testing.T) {
	lib := frontendtest.Lib(t)
	py := "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import pyverbs.device").Run(); err != nil {
		frontendtest.Missing(t, "%s cannot import pyverbs: install python3-pyverbs", py)
	}
	dir := t.TempDir()
	copyTests(t, dir)
	sock := frontendtest.Daemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if os.Geteuid() != 0 {
		frontendtest.Missing(t, "the pyverbs suite runs as root: raw packet QPs need CAP_NET_RAW, and its rdma_cm tests a net interface in sysfs")
	}
	cmd := exec.CommandContext(ctx, py, "tests/run_tests.py", "-v")
	if netSysfs() {
		// The rdma_cm tests look for the device's net interface in
		// /sys/class/infiniband/DEV/device/net/ and take its address from
		// ip: in a mount namespace of its own the suite sees a tmpfs there
		// naming lo (127.0.0.1, which the daemon's CM answers for).
		cmd = exec.CommandContext(ctx, "unshare", "-m", "sh", "-c", fakeSysfs+` && exec "$@"`, "sh", py, "tests/run_tests.py", "-v")
	}
	cmd.Dir = dir
	cmd.Env = frontendtest.Env(lib, sock)
	out, err := cmd.CombinedOutput()
	frontendtest.SanitizerReport(t, "pyverbs", string(out))
	if ctx.Err() != nil {
		t.Fatalf("the suite did not finish: %v\n%s", ctx.Err(), out)
	}
	got := parsePyverbs(strings.NewReader(string(out)))
	ran := regexp.MustCompile(`Ran (\d+) tests`).FindSubmatch(out)
	if ran == nil || fmt.Sprint(len(got)) != string(ran[1]) {
		t.Errorf("parsed %d results; the suite says %q (exit %v)\n%s", len(got), ran, err, out)
	}
	frontendtest.NoUnimplementedExcept(t, string(out), unmodelled)
	if *update {
		writeExpected(t, got)
		return
	}
	exp := readExpected(t)
	counts := map[string]int{}
	for id, g := range got {
		counts[g.Outcome]++
		e, ok := exp[id]
		switch {
		case e.Outcome == "flaky":
			// A known race of the suite's own: any outcome, said why.
		case !ok:
			if g.Outcome == "fail" {
				t.Errorf("%s failed and is not listed in testdata/pyverbs.txt", id)
			}
		case e.Outcome == "pass" && g.Outcome != "pass":
			t.Errorf("%s: %s (%s), listed as passing", id, g.Outcome, g.Reason)
		case e.Outcome != "fail" && g.Outcome == "fail":
			t.Errorf("%s failed, listed as %s", id, e.Outcome)
		case e.Outcome == "fail" && g.Outcome == "pass":
			t.Logf("%s passes now, listed as failing (%s): update testdata/pyverbs.txt", id, e.Reason)
		}
	}
	for id, e := range exp {
		if _, ok := got[id]; !ok && e.Outcome == "pass" {
			t.Errorf("%s did not run, listed as passing", id)
		}
	}
	t.Logf("pyverbs: %d tests: %d pass, %d skip, %d fail", len(got), counts["pass"], counts["skip"], counts["fail"])
	if t.Failed() {
		t.Logf("the suite's output:\n%s", out)
	}
}

// unmodelled names the verbs the suite probes that hcasim does not model:
// their tests skip on EOPNOTSUPP.
var unmodelled = []string{"ibv_alloc_mw", "ibv_alloc_dm", "ibv_alloc_parent_domain", "ibv_alloc_td",
	"ibv_open_xrcd", "ibv_create_srq", "ibv_create_srq_ex", "ibv_create_flow",
	"ibv_create_wq", "ibv_query_rt_values_ex", "ibv_import_device", "ibv_reg_dmabuf_mr", "ibv_advise_mr",
	"ibv_create_counters", "ibv_alloc_null_mr", "ibv_modify_cq", "ibv_create_cq_ex", "ibv_query_ece",
	"ibv_set_ece", "ibv_resize_cq", "ibv_reg_dm_mr", "ibv_query_qp_data_in_order", "mlx5dv_", "_mlx5dv_", "efadv_", "rdma_"}

// writeExpected rewrites testdata/pyverbs.txt, keeping the reasons given
// for failures.
func writeExpected(t *testing.T, got map[string]pyResult) {
	t.Helper()
	old := map[string]pyResult{}
	if _, err := os.Stat(filepath.Join("testdata", "pyverbs.txt")); err == nil {
		old = readExpected(t)
	}
	ids := make([]string, 0, len(got))
	for id := range got {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var b strings.Builder
	b.WriteString("# rdma-core's pyverbs tests on hcasim: what each does (go test ./ibverbs -run Pyverbs -update\n")
	b.WriteString("# rewrites this from a run). OUTCOME ID # reason: skip reasons are the suite's own; a fail\n")
	b.WriteString("# line says why the test cannot pass on hcasim; a flaky line (any outcome accepted, kept by\n")
	b.WriteString("# -update) says which race of the test makes its outcome vary.\n")
	for _, id := range ids {
		g := got[id]
		if old[id].Outcome == "flaky" {
			fmt.Fprintf(&b, "flaky %s # %s\n", id, old[id].Reason) // kept as it was said
			continue
		}
		reason := g.Reason
		if g.Outcome == "fail" {
			reason = ""
			if old[id].Outcome == "fail" {
				reason = old[id].Reason
			}
			if reason == "" {
				reason = "FIXME: why"
			}
		}
		if reason != "" {
			fmt.Fprintf(&b, "%s %s # %s\n", g.Outcome, id, reason)
		} else {
			fmt.Fprintf(&b, "%s %s\n", g.Outcome, id)
		}
	}
	if err := os.WriteFile(filepath.Join("testdata", "pyverbs.txt"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}
