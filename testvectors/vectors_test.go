package testvectors

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestVectorFiles(t *testing.T) {
	files, err := Files([]string{"."})
	require.NoError(t, err)
	for _, f := range files {
		t.Run(f, func(t *testing.T) {
			cs, err := Load(f)
			require.NoError(t, err)
			for i := range cs {
				c := &cs[i]
				t.Run(c.ID, func(t *testing.T) {
					assert.Empty(t, c.Run().Diffs, "%s (%s)", c.ID, c.Desc)
				})
			}
		})
	}
}
