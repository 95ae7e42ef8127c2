// Package ifc is the interface between the modelled device and its
// drivers, and nothing else: the command mailboxes (opcodes, statuses,
// byte layouts, as mlx5's mlx5_ifc.h), the capabilities QUERY_HCA_CAP
// reports, QP states, port counters, events, and Function, the one
// driver|device boundary. The device (package hca) and the drivers
// (hca/verbs, the socket client in hca/remote) both import it and nothing
// of each other, so the boundary holds at compile time.
package ifc
