// Package tooltest finds the external checkers tests run (tshark,
// scapy): a test skips with what to install where one is missing, unless
// HCASIM_REQUIRE_TOOLS is set (CI sets it), where it fails.
package tooltest

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// Need returns the path of the tool name (Debian package pkg). For
// /usr/bin/python3 it also needs scapy's RoCE layer.
func Need(t testing.TB, name, pkg string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err == nil && name == "/usr/bin/python3" {
		err = exec.Command(path, "-c", "import scapy.contrib.roce").Run()
	}
	if err != nil {
		msg := fmt.Sprintf("%s not usable (%v): install %s (Debian: apt-get install %s)", name, err, pkg, pkg)
		if os.Getenv("HCASIM_REQUIRE_TOOLS") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return path
}
