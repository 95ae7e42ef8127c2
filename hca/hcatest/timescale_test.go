//go:build !race

package hcatest_test

// timeScale divides the test devices' transport timers: the suite's
// retries after loss run 4× sooner than a NIC's.
const timeScale = 4
