#!/usr/bin/python3
"""Checks the ICRC of every RoCEv2 frame in a pcap independently of hcasim:
IPv4 frames with scapy's BTH layer (scapy.contrib.roce rebuilds the ICRC),
IPv6 frames (which scapy 2.5 cannot do) with the annex A17 mask and zlib.
Prints "ok N" or "bad N" per frame (N from 1), then "frames K".
Usage: icrc_check.py FILE.pcap"""
import struct
import sys
import zlib

from scapy.all import IP, IPv6, UDP, load_contrib, rdpcap

load_contrib("roce")
from scapy.contrib.roce import BTH  # noqa: E402


def icrc_v6(raw_ip6):
    """The ICRC of an IPv6 RoCEv2 packet (its bytes from the IPv6 header)."""
    plen = struct.unpack("!H", raw_ip6[4:6])[0]
    pkt = bytearray(raw_ip6[: 40 + plen])
    pkt[0] |= 0x0F  # traffic class, high nibble
    pkt[1:4] = b"\xff\xff\xff"  # traffic class low nibble, flow label
    pkt[7] = 0xFF  # hop limit
    pkt[40 + 6 : 40 + 8] = b"\xff\xff"  # UDP checksum
    pkt[48 + 4] = 0xFF  # BTH FECN, BECN, reserved
    crc = zlib.crc32(b"\xff" * 8 + bytes(pkt[:-4]))
    return struct.pack("<I", crc), bytes(raw_ip6[40 + plen - 4 : 40 + plen])


def main():
    frames = rdpcap(sys.argv[1])
    for i, f in enumerate(frames, 1):
        if IPv6 in f:
            want, got = icrc_v6(bytes(f[IPv6]))
        elif IP in f and BTH in f:
            # The IP datagram without the Ethernet padding a short frame
            # carries (scapy would read it as BTH payload).
            ip = IP(bytes(f[IP])[: f[IP].len])
            got = bytes(ip)[ip.len - 4 : ip.len]
            del ip[BTH].icrc
            rebuilt = bytes(ip)
            want = rebuilt[ip.len - 4 : ip.len]
        else:
            print("bad %d (not RoCEv2)" % i)
            continue
        print("%s %d" % ("ok" if want == got else "bad", i))
    print("frames %d" % len(frames))


if __name__ == "__main__":
    main()
