package testvectors

import (
	"testing"
)

func TestVectorFiles(t *testing.T) {
	files, err := Files([]string{"."})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		t.Run(f, func(t *testing.T) {
			cs, err := Load(f)
			if err != nil {
				t.Fatal(err)
			}
			for i := range cs {
				c := &cs[i]
				t.Run(c.ID, func(t *testing.T) {
					r := c.Run()
					for _, d := range r.Diffs {
						t.Errorf("%s (%s): %s", c.ID, c.Desc, d)
					}
				})
			}
		})
	}
}
