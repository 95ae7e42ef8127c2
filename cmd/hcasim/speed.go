package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/hcasim/hcasim/t10dif"
)

var speedOpts struct {
	json    *bool
	filter  *string
	runs    *int
	runTime *time.Duration
}

var speedCmd = &command{
	name:    "speed",
	summary: "measure the throughput of each guard kernel and PI operation on this machine (like openssl speed)",
	usage:   "[--json] [--filter SUBSTRING] [--runs N] [--time DURATION]",
	example: "hcasim speed --filter crc16/avx512",
	flags: func(fs *flag.FlagSet) {
		speedOpts.json = fs.Bool("json", false, "print only a JSON array of {kernel, impl, size, interval, gbps}")
		speedOpts.filter = fs.String("filter", "", "measure only rows whose kernel/impl/size/interval label contains `SUBSTRING`")
		speedOpts.runs = fs.Int("runs", 5, "timed runs per row; the median is reported")
		speedOpts.runTime = fs.Duration("time", 25*time.Millisecond, "length of one timed run")
	},
	run: runSpeed,
}

// speedRow is one measurement; gbps counts data bytes (1e9 bytes/s).
type speedRow struct {
	Kernel   string  `json:"kernel"`
	Impl     string  `json:"impl"`
	Size     int     `json:"size"`
	Interval int     `json:"interval"`
	GBps     float64 `json:"gbps"`
	Min      float64 `json:"-"`
	Max      float64 `json:"-"`
}

var speedSizes = []int{512, 4096, 65536, 16 << 20}

func runSpeed(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error {
	if len(args) != 0 {
		fmt.Fprintf(stderr, "hcasim speed: unexpected arguments %q\n", args)
		fs.Usage()
		return errUsage
	}
	if *speedOpts.runs < 1 || *speedOpts.runs > 101 || *speedOpts.runTime <= 0 {
		return fmt.Errorf("--runs must be 1..101 and --time positive")
	}
	maxSize := slices.Max(speedSizes)
	rng := rand.New(rand.NewPCG(1, 2))
	src := make([]byte, maxSize)
	for i := range src {
		src[i] = byte(rng.Uint32())
	}
	dst := make([]byte, maxSize+maxSize/512*8)
	ext := make([]byte, maxSize+maxSize/512*8)

	var rows []speedRow
	measure := func(kernel, impl string, size, interval int, f func()) {
		label := fmt.Sprintf("%s/%s/%d/%d", kernel, impl, size, interval)
		if !strings.Contains(label, *speedOpts.filter) {
			return
		}
		r := speedRow{Kernel: kernel, Impl: impl, Size: size, Interval: interval}
		r.GBps, r.Min, r.Max = timeKernel(f, size, *speedOpts.runs, *speedOpts.runTime)
		rows = append(rows, r)
		if !*speedOpts.json {
			fmt.Fprintf(stdout, "%-10s %-8s %9d %5d  %8.2f GB/s  (min %.2f max %.2f)\n",
				kernel, impl, size, interval, r.GBps, r.Min, r.Max)
		}
	}
	if !*speedOpts.json {
		fmt.Fprintf(stdout, "%-10s %-8s %9s %5s  %s (median of %d runs of %v; GB/s = 1e9 data bytes/s)\n",
			"kernel", "impl", "size", "intvl", "throughput", *speedOpts.runs, *speedOpts.runTime)
	}
	var sink uint64
	for _, im := range t10dif.Impls() {
		for _, n := range speedSizes {
			measure("crc16", im.Name, n, 0, func() { sink += uint64(im.CRC16(0, src[:n])) })
		}
	}
	for _, im := range t10dif.Impls() {
		for _, n := range speedSizes {
			measure("crc64nvme", im.Name, n, 0, func() { sink += im.CRC64NVMe(0, src[:n]) })
		}
	}
	for _, n := range speedSizes {
		measure("crc32c", "stdlib", n, 0, func() { sink += uint64(t10dif.CRC32C(0, src[:n])) })
	}
	for _, n := range speedSizes {
		measure("ipcsum", "generic", n, 0, func() { sink += uint64(t10dif.IPChecksum(src[:n])) })
	}
	impl := t10dif.ActiveImpl()
	for _, iv := range []int{512, 4096} {
		d := t10dif.Domain{Format: t10dif.FormatPI8, Type: t10dif.Type1, Interval: iv, RefTag: 7}
		for _, n := range speedSizes {
			if n < iv {
				continue
			}
			out := n / iv * (iv + 8)
			if _, err := t10dif.Generate(d, t10dif.Buf{Data: ext[:out]}, src[:n]); err != nil {
				return err
			}
			var ferr error
			measure("insert", impl, n, iv, func() {
				_, err := t10dif.Generate(d, t10dif.Buf{Data: dst[:out]}, src[:n])
				ferr = cmpErr(ferr, err)
			})
			measure("verify", impl, n, iv, func() {
				ferr = cmpErr(ferr, t10dif.Verify(d, t10dif.CheckAll, t10dif.Buf{Data: ext[:out]}))
			})
			measure("strip", impl, n, iv, func() {
				_, err := t10dif.Strip(d, t10dif.CheckAll, dst[:n], t10dif.Buf{Data: ext[:out]})
				ferr = cmpErr(ferr, err)
			})
			if ferr != nil {
				return fmt.Errorf("interval %d size %d: %w", iv, n, ferr)
			}
		}
	}
	_ = sink
	if *speedOpts.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", " ")
		if rows == nil {
			rows = []speedRow{}
		}
		return enc.Encode(rows)
	}
	return nil
}

func cmpErr(prev, err error) error {
	if prev != nil {
		return prev
	}
	return err
}

// timeKernel returns the median, min and max throughput in GB/s of f, which
// processes size bytes per call, over runs timed runs of about runTime each.
func timeKernel(f func(), size, runs int, runTime time.Duration) (med, lo, hi float64) {
	calls := 1
	for {
		t0 := time.Now()
		for range calls {
			f()
		}
		el := time.Since(t0)
		if el >= runTime/4 || calls >= 1<<30 {
			calls = max(1, int(float64(calls)*float64(runTime)/float64(max(el, 1))))
			break
		}
		calls *= 2
	}
	for range max(1, calls/4) { // warm-up
		f()
	}
	g := make([]float64, runs)
	for r := range g {
		t0 := time.Now()
		for range calls {
			f()
		}
		g[r] = float64(size) * float64(calls) / float64(time.Since(t0).Nanoseconds())
	}
	slices.Sort(g)
	return g[runs/2], g[0], g[runs-1]
}
