package ifc

import "encoding/binary"

// NodeGUID returns the node GUID of the device at LID lid: Mellanox's OUI
// with the LID (0x0002c903_00LLLL01). It is the interface ID of the
// port's link-local GIDs.
func NodeGUID(lid uint16) uint64 { return 0x0002c90300000000 | uint64(lid)<<8 | 0x01 }

// GIDEntries is how many entries of the port's GID table hold a GID: a
// RoCE v1 and a RoCE v2 entry for each address, as Linux fills a RoCE
// port's table — index 0 and 1 the link-local GID (fe80:: and the node
// GUID), 2 and 3 the IPv4-mapped GID of the port's wire address, or of
// 127.0.0.1 for a port without a wire.
const GIDEntries = 4

// GIDIsRoCEv1 reports whether the port's GID table entry index is a
// RoCE v1 one (the even entries; the odd ones are RoCE v2), as Linux fills
// a RoCE port's table: an entry of each type per address.
func GIDIsRoCEv1(index int) bool { return index%2 == 0 }

// PortGID returns the GID at index of the table of the port with LID lid
// and wire GID wire (zero: no wire), and whether the entry is filled. Odd
// entries are RoCE v2, even ones RoCE v1. The device (for a UD send's
// source GID) and the Go driver (QueryGID) read the same table.
func PortGID(index int, lid uint16, wire [16]byte) ([16]byte, bool) {
	var g [16]byte
	switch {
	case index < 0 || index >= GIDEntries:
		return g, false
	case index >= 2 && wire != [16]byte{}:
		return wire, true
	case index >= 2:
		return [16]byte{10: 0xff, 11: 0xff, 12: 127, 15: 1}, true
	}
	g[0], g[1] = 0xfe, 0x80
	binary.BigEndian.PutUint64(g[8:], NodeGUID(lid))
	return g, true
}
