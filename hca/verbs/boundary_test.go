package verbs_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDriverDoesNotLinkDevice holds the driver|device boundary at compile
// time: the driver and its socket client build without the device.
func TestDriverDoesNotLinkDevice(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool on PATH to list the driver's dependencies")
	}
	out, err := exec.Command(goTool, "list", "-deps", "github.com/hcasim/hcasim/hca/verbs").CombinedOutput()
	require.NoError(t, err, "go list: %s", out)
	for _, dep := range strings.Fields(string(out)) {
		require.NotContains(t, []string{"github.com/hcasim/hcasim/hca", "github.com/hcasim/hcasim/hca/remote/daemon", "github.com/hcasim/hcasim/roce"},
			dep, "hca/verbs links the device")
	}
}
