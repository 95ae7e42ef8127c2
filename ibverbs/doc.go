// Package ibverbs holds hcasim's replacement libibverbs.so.1 and its tests.
//
// The library itself is C (ibverbs/c, built by `make lib` into bin/lib):
// a client of `hcasim serve` (docs/PROTOCOL.md) that gives unmodified
// programs linked against rdma-core's libibverbs and libmlx5 a device —
// ibv_devinfo, ibv_rc_pingpong, perftest, rdma-core's pyverbs tests — with
// no kernel module, no root and no sysfs. `hcasim exec -- CMD` runs a
// program on it. Its export table is generated from the installed
// rdma-core libraries by ibverbs/symgen.
//
// This Go package has no API: its tests build the library and run those
// programs against an in-process daemon.
package ibverbs
