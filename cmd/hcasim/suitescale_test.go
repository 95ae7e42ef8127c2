//go:build !race

package main

// suiteScale is the --time-scale of the daemons the suite runs against:
// their retries after loss run sooner than a NIC's. A scale that leaves
// an ACK timeout shorter than the time a loaded machine takes to move a
// 4 MiB message's packets turns timeouts into RETRY_EXC_ERR.
const suiteScale = "4"
