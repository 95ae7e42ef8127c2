package t10dif

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkPI measures the one-shot operations over interleaved pi8/CRC16
// data: GB/s counts data bytes.
func BenchmarkPI(b *testing.B) {
	data := randBytes(rand.New(rand.NewPCG(1, 1)), 1<<20)
	for _, iv := range []int{512, 4096} {
		d := Domain{Format: FormatPI8, Type: Type1, Interval: iv, RefTag: 7}
		for _, n := range []int{4096, 65536, 1 << 20} {
			ext := make([]byte, n/iv*(iv+8))
			out := make([]byte, len(ext))
			if _, err := Generate(d, Buf{Data: ext}, data[:n]); err != nil {
				b.Fatal(err)
			}
			name := fmt.Sprintf("interval=%d/size=%s", iv, sizeName(n))
			b.Run("op=insert/"+name, func(b *testing.B) {
				b.SetBytes(int64(n))
				for b.Loop() {
					if _, err := Generate(d, Buf{Data: out}, data[:n]); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("op=verify/"+name, func(b *testing.B) {
				b.SetBytes(int64(n))
				for b.Loop() {
					if err := Verify(d, CheckAll, Buf{Data: ext}); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("op=strip/"+name, func(b *testing.B) {
				b.SetBytes(int64(n))
				for b.Loop() {
					if _, err := Strip(d, CheckAll, out[:n], Buf{Data: ext}); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("op=pass/"+name, func(b *testing.B) {
				b.SetBytes(int64(n))
				for b.Loop() {
					if _, err := Pass(d, CheckAll, Buf{Data: out}, Buf{Data: ext}); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
