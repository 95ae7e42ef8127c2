// Command udpanchor measures what loopback UDP itself moves on this
// machine, the ceiling of hcasim's RoCEv2 wire between two daemons
// (docs/PERFORMANCE.md, issue 12): one goroutine sends datagrams of -seg
// bytes from 127.0.77.3 to 127.0.77.2, -per of them per sendmsg (UDP GSO
// when more than one), and another receives them with UDP GRO, for -d;
// it prints the bytes and datagrams per second sent and received. The
// datagrams carry no RoCE headers, no ICRC is computed and nothing is
// copied after the receive: hcasim does all of that on top.
//
//	go run ./scripts/udpanchor                   # 4096-byte payloads + RoCE headers, 15 per send
//	go run ./scripts/udpanchor -seg 122 -per 1   # 64-byte WRITEs, one per send
package main

import (
	"encoding/binary"
	"flag"
	"fmt"
	"net"
	"os"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

func main() {
	seg := flag.Int("seg", 4096+58, "datagram bytes (a RoCEv2 packet's UDP payload: BTH, RETH, data, ICRC)")
	per := flag.Int("per", 15, "datagrams per sendmsg (UDP GSO when more than 1; at most 64 KiB per send)")
	dur := flag.Duration("d", 3*time.Second, "how long to send")
	flag.Parse()
	if *seg < 1 || *seg > 65507 || *per < 1 || *seg**per > 65507 || *dur <= 0 || *dur > time.Minute {
		fmt.Fprintln(os.Stderr, "udpanchor: want 1 <= seg, seg*per <= 65507 and 0 < d <= 1m")
		os.Exit(2)
	}
	if err := run(*seg, *per, *dur); err != nil {
		fmt.Fprintln(os.Stderr, "udpanchor:", err)
		os.Exit(1)
	}
}

func run(seg, per int, dur time.Duration) error {
	rc, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 77, 2)})
	if err != nil {
		return err
	}
	defer rc.Close()
	if err := setsockopt(rc, unix.SOL_UDP, unix.UDP_GRO, 1); err != nil {
		return fmt.Errorf("UDP_GRO: %w", err)
	}
	if err := setsockopt(rc, unix.SOL_SOCKET, unix.SO_RCVBUF, 8<<20); err != nil {
		return fmt.Errorf("SO_RCVBUF: %w", err)
	}
	sc, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 77, 3)})
	if err != nil {
		return err
	}
	defer sc.Close()
	to := rc.LocalAddr().(*net.UDPAddr)

	var gotBytes atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 1<<16)
		oob := make([]byte, 64)
		for {
			n, _, _, _, err := rc.ReadMsgUDP(buf, oob)
			if err != nil {
				return // closed
			}
			gotBytes.Add(int64(n)) // GRO: several datagrams of seg bytes at once
		}
	}()

	payload := make([]byte, seg*per)
	for i := range payload {
		payload[i] = byte(i*7 + 1)
	}
	var oob []byte
	if per > 1 {
		var words [4]uint64 // aligned for the header
		oob = unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), unix.CmsgSpace(2))
		h := (*unix.Cmsghdr)(unsafe.Pointer(&words[0]))
		h.Level, h.Type = unix.SOL_UDP, unix.UDP_SEGMENT
		h.SetLen(unix.CmsgLen(2))
		binary.NativeEndian.PutUint16(oob[unix.CmsgLen(0):], uint16(seg))
	}
	start := time.Now()
	var sent int64
	for time.Since(start) < dur {
		if _, _, err := sc.WriteMsgUDP(payload, oob, to); err != nil {
			return fmt.Errorf("send: %w", err)
		}
		sent += int64(len(payload))
	}
	el := time.Since(start).Seconds()
	time.Sleep(100 * time.Millisecond) // what is still in the socket buffer
	rc.Close()
	<-done
	fmt.Printf("udpanchor seg %d per %d: sent %.2f GB/s (%.0f datagrams/s), received %.2f GB/s (%.0f datagrams/s)\n",
		seg, per, float64(sent)/el/1e9, float64(sent/int64(seg))/el, float64(gotBytes.Load())/el/1e9, float64(gotBytes.Load()/int64(seg))/el)
	return nil
}

func setsockopt(c *net.UDPConn, level, opt, v int) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := raw.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), level, opt, v) }); err != nil {
		return err
	}
	return serr
}
