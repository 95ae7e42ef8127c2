//go:build race

package hcatest_test

// timeScale divides the test devices' transport timers. Under the race
// detector the device runs many times slower than it does otherwise, and
// a 4 MiB message's packets can take longer than a shortened ACK timeout
// to go through on a loaded machine (every timeout then counts against
// the retry count, and the transfer fails with RETRY_EXC_ERR): the timers
// keep a NIC's values.
const timeScale = 1
