package verbs_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hcasim/hcasim/hca"
	"github.com/hcasim/hcasim/hca/ifc"
	"github.com/hcasim/hcasim/hca/verbs"
)

// QUERY_USAGE counts what the whole device holds, over every function, and
// gives it back when a function closes.
func TestUsage(t *testing.T) {
	dev := hca.New(hca.Options{})
	defer dev.Close()
	a, err := verbs.Open(dev)
	require.NoError(t, err)
	defer a.Close()
	u, err := a.Usage()
	require.NoError(t, err)
	require.Equal(t, ifc.Usage{Functions: 1}, u)

	b, err := verbs.Open(dev)
	require.NoError(t, err)
	pd, err := b.AllocPD()
	require.NoError(t, err)
	_, err = b.CreateCQ(16, nil)
	require.NoError(t, err)
	_, err = pd.RegMR(make([]byte, 8192), verbs.AccessLocalWrite)
	require.NoError(t, err)
	u, err = a.Usage()
	require.NoError(t, err)
	require.Equal(t, uint64(2), u.Functions)
	require.Equal(t, uint64(1), u.PDs)
	require.Equal(t, uint64(1), u.CQs)
	require.Equal(t, uint64(1), u.Mkeys)
	require.NotZero(t, u.Maps, "the CQ's ring and the MR's memory are mapped")
	require.NotZero(t, u.MappedBytes)
	require.Equal(t, u, dev.Usage(), "the command and the device agree")

	require.NoError(t, b.Close())
	u, err = a.Usage()
	require.NoError(t, err)
	require.Equal(t, ifc.Usage{Functions: 1}, u, "a closed function gives everything back")
}
