package ifc

// PortCounters are a port's counters, as a user reads them (and the
// daemon logs them).
type PortCounters struct {
	TxPackets, TxBytes uint64 // packets and bytes sent on the wire
	RxPackets, RxBytes uint64 // packets and bytes received
	ICRCErrors         uint64 // received packets dropped for a bad ICRC
	RxDropped          uint64 // received packets dropped: malformed, no such QP, not its peer, queue full
	Retransmits        uint64 // requests sent again (timeout, sequence NAK, RNR NAK)
	Timeouts           uint64 // ACK timeouts that resent requests
	RetryExceeded      uint64 // WRs failed with RETRY_EXC_ERR or RNR_RETRY_EXC_ERR
	SeqNAKsRecv        uint64 // PSN sequence NAKs received
	RNRNAKsRecv        uint64 // RNR NAKs received
	NAKsSent           uint64 // NAKs sent (sequence, RNR, errors)
	OutOfSequence      uint64 // packets that arrived after a gap (dropped)
	Duplicates         uint64 // duplicate requests answered again or dropped
	InjectedLoss       uint64 // fault injection: packets dropped, duplicated, reordered, corrupted, delayed
	InjectedDup        uint64
	InjectedReorder    uint64
	InjectedCorrupt    uint64
	InjectedDelay      uint64
	NotPeer            uint64 // requests dropped: from a QP or host other than the QP's connected peer
	MsgDropped         uint64 // UC messages and UD datagrams a responder dropped silently: no receive WQE, a bad R_Key or Q_Key, too long, lost packets
}

// Values returns the counters in field order (the QUERY_PORT_COUNTERS
// layout).
func (c PortCounters) Values() []uint64 {
	return []uint64{c.TxPackets, c.TxBytes, c.RxPackets, c.RxBytes, c.ICRCErrors, c.RxDropped, c.Retransmits, c.Timeouts,
		c.RetryExceeded, c.SeqNAKsRecv, c.RNRNAKsRecv, c.NAKsSent, c.OutOfSequence, c.Duplicates, c.InjectedLoss,
		c.InjectedDup, c.InjectedReorder, c.InjectedCorrupt, c.InjectedDelay, c.NotPeer, c.MsgDropped}
}

// CountersFrom is the inverse of Values; missing values are zero.
func CountersFrom(v []uint64) PortCounters {
	v = append(v, make([]uint64, 21)...)
	return PortCounters{TxPackets: v[0], TxBytes: v[1], RxPackets: v[2], RxBytes: v[3], ICRCErrors: v[4], RxDropped: v[5],
		Retransmits: v[6], Timeouts: v[7], RetryExceeded: v[8], SeqNAKsRecv: v[9], RNRNAKsRecv: v[10], NAKsSent: v[11],
		OutOfSequence: v[12], Duplicates: v[13], InjectedLoss: v[14], InjectedDup: v[15], InjectedReorder: v[16],
		InjectedCorrupt: v[17], InjectedDelay: v[18], NotPeer: v[19], MsgDropped: v[20]}
}

// LogAttrs returns the non-zero counters as log attributes.
func (c PortCounters) LogAttrs() []any {
	names := []string{"tx_packets", "tx_bytes", "rx_packets", "rx_bytes", "icrc_errors", "rx_dropped", "retransmits", "timeouts",
		"retry_exceeded", "seq_naks_recv", "rnr_naks_recv", "naks_sent", "out_of_sequence", "duplicates", "injected_loss",
		"injected_dup", "injected_reorder", "injected_corrupt", "injected_delay", "not_peer", "msg_dropped"}
	var out []any
	for i, v := range c.Values() {
		if v != 0 {
			out = append(out, names[i], v)
		}
	}
	return out
}
