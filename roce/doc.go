// Package roce is RoCEv2 on the wire: the InfiniBand base transport header
// (BTH) and the extension headers RC uses (RETH, AETH, AtomicETH,
// AtomicAckETH, ImmDt, IETH) as a gopacket layer bound to UDP port 4791,
// the invariant CRC (ICRC), segmentation of messages by path MTU, 24-bit
// PSN arithmetic, Ethernet/IP/UDP frames for captures, and a pcap writer.
//
// A [Packet] decodes in place (its Payload points into the bytes decoded)
// and serializes by prepending its headers, as gopacket layers do. The
// ICRC covers the IP and UDP headers, so it is sealed last: [SealICRC] on
// a finished IP packet, [FrameBuilder.Build] for a whole frame, or
// [DatagramICRC] for a packet sent through a UDP socket, where neither end
// sees the IP header. A [Parser] decodes frames without allocating and
// checks the ICRC.
package roce
