#!/usr/bin/env python3
"""pyclient: a client of an hcasim daemon (hcasim serve), written from
docs/PROTOCOL.md with the Python standard library only.

Usage: pyclient.py SOCKET

It connects, says HELLO, maps shared memory (sealed memfds), queries the
capabilities, allocates a PD, creates a CQ and two RC QPs of its own function
connected to each other (RST->INIT->RTR->RTS with the device's LID),
registers a source buffer (MTT mkey) and a destination buffer (PA mkey),
posts an RDMA WRITE, rings the send queue, polls the CQ by the owner bit and
checks the completion and the data. A second WRITE is awaited through an
armed CQ and its COMPLETION event. It then tears everything down, closes with
shutdown(SHUT_WR) and exits 0; on any failure it prints why and exits 1.
"""

import fcntl
import mmap
import os
import socket
import struct
import sys
import time

# Protocol (docs/PROTOCOL.md sections 2-4).
MAGIC = 0x48434153
VERSION = 1
HEADER = struct.Struct(">HHII")  # type, reserved, id, payload length
MAX_MESSAGE = 65536
T_HELLO, T_COMMAND, T_MAP_MEM, T_UNMAP, T_RING_SQ, T_RING_RQ, T_ARM_CQ = 1, 2, 3, 4, 5, 6, 7
T_EVENTS, T_ERROR = 0x40, 0x41
REPLY = 0x80
STATUSES = ["OK", "BAD_MESSAGE", "BAD_VERSION", "UNKNOWN_TYPE", "BAD_FD",
            "NO_MEMORY", "NOT_MAPPED", "NOT_READY", "SHUTDOWN"]
EV_COMPLETION = 0x00

# Device (docs/DEVICE.md, PROTOCOL.md section 7).
CMD_QUERY_HCA_CAP = 0x100
CMD_CREATE_MKEY, CMD_DESTROY_MKEY = 0x200, 0x202
CMD_CREATE_CQ, CMD_DESTROY_CQ = 0x400, 0x401
CMD_CREATE_QP, CMD_DESTROY_QP = 0x500, 0x501
CMD_RST2INIT, CMD_INIT2RTR, CMD_RTR2RTS, CMD_QUERY_QP = 0x502, 0x503, 0x504, 0x50B
CMD_ALLOC_PD, CMD_DEALLOC_PD = 0x800, 0x801

QP_ACCESS_READ, QP_ACCESS_WRITE = 1, 2
PERM_LR, PERM_LW, PERM_RR, PERM_RW = 0x04, 0x08, 0x10, 0x20
MODE_PA, MODE_MTT = 0, 1
PAGE_SHIFT = 12
PAGE = 1 << PAGE_SHIFT

WQEBB, CQE_SIZE = 64, 64
OP_RDMA_WRITE = 0x08
CE_CQ_UPDATE = 0x08
CQE_REQ, CQE_REQ_ERR, CQE_INVALID = 0, 13, 0xF


class Failure(Exception):
    pass


class DaemonError(Failure):
    def __init__(self, status, reason, msg_id):
        name = STATUSES[status] if status < len(STATUSES) else "status %d" % status
        super().__init__("daemon refused message %d: %s: %s" % (msg_id, name, reason))
        self.status = status


def be32_native(v):
    """A big-endian 32-bit value as the native word that stores those bytes."""
    return struct.unpack("=I", struct.pack(">I", v & 0xFFFFFFFF))[0]


class Memory:
    """A sealed memfd mapped here and, through MAP_MEM, in the daemon."""

    def __init__(self, conn, size, align=PAGE):
        self.size = (size + PAGE - 1) & ~(PAGE - 1)
        self.fd = os.memfd_create("pyclient", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        os.ftruncate(self.fd, self.size)
        fcntl.fcntl(self.fd, fcntl.F_ADD_SEALS,
                    fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
        self.mm = mmap.mmap(self.fd, self.size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        self.words = memoryview(self.mm).cast("I")  # aligned 32-bit loads and stores
        reply = conn.request(T_MAP_MEM, struct.pack(">QII", self.size, align, 0), fd=self.fd)
        if len(reply) != 16:
            raise Failure("MAP_MEM reply of %d bytes" % len(reply))
        self.iova = struct.unpack_from(">Q", reply, 8)[0]
        os.close(self.fd)  # the mappings keep the memory
        self.fd = -1
        self.conn = conn
        self.mapped = True

    def io(self, off):
        return self.iova + off

    def write(self, off, data):
        self.mm[off:off + len(data)] = data

    def read(self, off, n):
        return bytes(self.mm[off:off + n])

    def store32(self, off, v):
        """Publish a BE32 with one aligned 32-bit store (PROTOCOL.md section 6)."""
        assert off % 4 == 0
        self.words[off // 4] = be32_native(v)

    def load_word(self, off):
        """The 4 bytes at off, read with one aligned 32-bit load."""
        return struct.pack("=I", self.words[off // 4])

    def unmap(self):
        if self.mapped:
            self.conn.request(T_UNMAP, struct.pack(">Q", self.iova))
            self.mapped = False

    def release(self):
        self.words.release()
        self.mm.close()


class Conn:
    """One connection: one function of the daemon's device."""

    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock.settimeout(20)
        self.sock.connect(path)
        self.next_id = 0
        self.events = []
        self.sent = {}  # type counts, for the summary

    def send(self, mtype, msg_id, payload=b"", fd=None):
        msg = HEADER.pack(mtype, 0, msg_id, len(payload)) + payload
        if len(msg) > MAX_MESSAGE:
            raise Failure("message of %d bytes" % len(msg))
        if fd is None:
            self.sock.send(msg)
        else:
            socket.send_fds(self.sock, [msg], [fd])
        self.sent[mtype] = self.sent.get(mtype, 0) + 1

    def receive(self, until_event=False):
        """One message; EVENTS are queued (and end the wait, returning None,
        with until_event), ERROR raised."""
        while True:
            pkt = self.sock.recv(MAX_MESSAGE + 1)
            if not pkt:
                raise Failure("the daemon closed the connection")
            if len(pkt) > MAX_MESSAGE or len(pkt) < HEADER.size:
                raise Failure("packet of %d bytes" % len(pkt))
            mtype, rsvd, msg_id, n = HEADER.unpack_from(pkt)
            body = pkt[HEADER.size:]
            if rsvd != 0 or n != len(body):
                raise Failure("bad header %r" % (HEADER.unpack_from(pkt),))
            if mtype == T_EVENTS:
                if len(body) % 8:
                    raise Failure("EVENTS payload of %d bytes" % len(body))
                for off in range(0, len(body), 8):
                    self.events.append((body[off], struct.unpack_from(">I", body, off + 4)[0]))
                if until_event:
                    return None
                continue
            if mtype == T_ERROR:
                status = struct.unpack_from(">I", body)[0]
                raise DaemonError(status, body[4:].decode("utf-8", "replace"), msg_id)
            return mtype, msg_id, body

    def request(self, mtype, payload, fd=None):
        self.next_id = self.next_id % 0xFFFFFFFF + 1  # non-zero ids
        msg_id = self.next_id
        self.send(mtype, msg_id, payload, fd)
        rtype, rid, body = self.receive()
        if rid != msg_id or rtype != mtype | REPLY:
            raise Failure("request %#x id %d answered by %#x id %d" % (mtype, msg_id, rtype, rid))
        if mtype != T_COMMAND and struct.unpack_from(">I", body)[0] != 0:
            raise Failure("reply status %d" % struct.unpack_from(">I", body)[0])
        return body

    def hello(self):
        r = self.request(T_HELLO, struct.pack(">IHH", MAGIC, VERSION, 0))
        if len(r) != 12:
            raise Failure("HELLO reply of %d bytes" % len(r))
        _, version, lid, max_msg = struct.unpack(">IHHI", r)
        if version != VERSION:
            raise Failure("daemon speaks version %d" % version)
        return lid, max_msg

    def command(self, opcode, size, fields=(), name=None):
        """Run a command; fields are (offset, struct format, value)."""
        mbox = bytearray(max(size, 8))
        struct.pack_into(">H", mbox, 0, opcode)
        for off, fmt, v in fields:
            struct.pack_into(">" + fmt, mbox, off, v)
        return self.command_raw(bytes(mbox), name or "command %#x" % opcode)

    def command_raw(self, mbox, name):
        out = self.request(T_COMMAND, mbox)
        if len(out) < 8:
            raise Failure("%s: output mailbox of %d bytes" % (name, len(out)))
        if out[0] != 0:
            raise Failure("%s: status %#x syndrome %#x: %s" % (
                name, out[0], struct.unpack_from(">I", out, 4)[0], out[8:].decode("utf-8", "replace")))
        return out

    def ring_sq(self, qpn):
        self.send(T_RING_SQ, 0, struct.pack(">I", qpn))

    def arm_cq(self, cqn, word):
        self.request(T_ARM_CQ, struct.pack(">II", cqn, word))

    def close(self):
        """shutdown(SHUT_WR), then read to end-of-file: the daemon has closed
        the function (QPs stopped, memory unmapped) when the EOF arrives."""
        self.sock.shutdown(socket.SHUT_WR)
        while True:
            pkt = self.sock.recv(MAX_MESSAGE + 1)
            if not pkt:
                break
        self.sock.close()


class CQ:
    def __init__(self, conn, mem, ring_off, db_off, log_size):
        self.conn, self.mem, self.ring, self.db, self.log = conn, mem, ring_off, db_off, log_size
        self.ci = 0
        for i in range(1 << log_size):  # op_own = INVALID, owner 1 (PROTOCOL.md 7.3)
            mem.write(ring_off + i * CQE_SIZE + 63, b"\xf1")
        out = conn.command(CMD_CREATE_CQ, 32, [(8, "B", log_size), (16, "Q", mem.io(ring_off)),
                                               (24, "Q", mem.io(db_off))], "CREATE_CQ")
        self.cqn = struct.unpack_from(">I", out, 8)[0]

    def poll(self):
        """The next CQE (64 bytes) if the device wrote it, else None."""
        off = self.ring + (self.ci & ((1 << self.log) - 1)) * CQE_SIZE
        last = self.mem.load_word(off + 60)  # the publishing word first
        op_own = last[3]
        if op_own >> 4 == CQE_INVALID or (op_own & 1) != (self.ci >> self.log) & 1:
            return None
        cqe = self.mem.read(off, 60) + last
        self.ci += 1
        self.mem.store32(self.db, self.ci & 0xFFFFFF)
        return cqe

    def wait(self, timeout=10.0):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            c = self.poll()
            if c is not None:
                return c
            time.sleep(0.0005)
        raise Failure("no completion in CQ %#x within %.0f s" % (self.cqn, timeout))


class QP:
    LOG_SQ, LOG_RQ, LOG_STRIDE = 4, 0, 4

    def __init__(self, conn, mem, off, pd, cq):
        self.conn, self.mem = conn, mem
        self.sq = off                           # 16 WQEBBs: 1024 bytes
        self.rq = off + (WQEBB << self.LOG_SQ)  # 1 receive WQE of 16 bytes
        self.db = self.rq + 64                  # doorbell record, 8 bytes
        self.pi = 0                             # send counter (WQEBBs posted)
        out = conn.command(CMD_CREATE_QP, 56, [
            (8, "I", pd), (12, "I", cq.cqn), (16, "I", cq.cqn), (20, "I", 0),
            (24, "B", self.LOG_SQ), (25, "B", self.LOG_RQ), (26, "B", self.LOG_STRIDE),
            (32, "Q", mem.io(self.sq)), (40, "Q", mem.io(self.rq)), (48, "Q", mem.io(self.db)),
        ], "CREATE_QP")
        self.qpn = struct.unpack_from(">I", out, 8)[0]
        self.psn = (self.qpn * 0x10001) & 0xFFFFFF

    def modify(self, opcode, name, fields):
        self.conn.command(opcode, 48, [(8, "I", self.qpn)] + fields, "%s of QP %#x" % (name, self.qpn))

    def connect(self, lid, peer):
        self.modify(CMD_RST2INIT, "RST2INIT", [(19, "B", QP_ACCESS_READ | QP_ACCESS_WRITE)])
        self.modify(CMD_INIT2RTR, "INIT2RTR", [(20, "H", lid), (24, "I", peer.qpn), (28, "I", peer.psn),
                                               (36, "B", 12), (41, "B", 16)])
        self.modify(CMD_RTR2RTS, "RTR2RTS", [(32, "I", self.psn), (37, "B", 14), (38, "B", 7),
                                             (39, "B", 7), (40, "B", 16)])
        out = self.conn.command(CMD_QUERY_QP, 12, [(8, "I", self.qpn)], "QUERY_QP")
        if out[8] != 3:
            raise Failure("QP %#x in state %d after RTR2RTS, want RTS (3)" % (self.qpn, out[8]))

    def post_write(self, laddr, lkey, n, raddr, rkey):
        """An RDMA WRITE WQE: ctrl + raddr + data segment (DS 3, one WQEBB)."""
        idx = self.pi
        wqe = bytearray(WQEBB)
        struct.pack_into(">IIBBBBI", wqe, 0, (idx & 0xFFFF) << 8 | OP_RDMA_WRITE, self.qpn << 8 | 3,
                         0, 0, 0, CE_CQ_UPDATE, 0)
        struct.pack_into(">QII", wqe, 16, raddr, rkey, 0)
        struct.pack_into(">IIQ", wqe, 32, n, lkey, laddr)
        slot = idx & ((1 << self.LOG_SQ) - 1)
        self.mem.write(self.sq + slot * WQEBB, bytes(wqe))
        self.pi = (self.pi + 1) & 0xFFFF
        self.mem.store32(self.db + 4, self.pi)  # send counter, then the doorbell
        self.conn.ring_sq(self.qpn)
        return idx


def create_mkey(conn, pd, mode, access, start, length, xlt=b"", xlt_octowords=0, variant=0):
    ctx = bytearray(64)
    ctx[0] = (mode >> 2 & 7) << 2            # free 0, access_mode[4:2]
    ctx[2] = access | (mode & 3)              # umr_en 0, permissions, access_mode[1:0]
    struct.pack_into(">I", ctx, 4, 0xFFFFFF << 8 | variant)
    struct.pack_into(">I", ctx, 12, pd & 0xFFFFFF)
    struct.pack_into(">QQ", ctx, 16, start, length)
    struct.pack_into(">I", ctx, 52, xlt_octowords)
    ctx[59] = PAGE_SHIFT
    mbox = bytearray(16)
    struct.pack_into(">H", mbox, 0, CMD_CREATE_MKEY)
    out = conn.command_raw(bytes(mbox) + bytes(ctx) + xlt, "CREATE_MKEY")
    index = struct.unpack_from(">I", out, 8)[0]
    return index, (index << 8 | variant) & 0xFFFFFFFF


def mtt(start, length):
    """MTT entries (page IOVA | read | write) covering [start, start+length), padded to octowords."""
    base = start & ~(PAGE - 1)
    n = (start + length - base + PAGE - 1) >> PAGE_SHIFT
    xlt = b"".join(struct.pack(">Q", base + i * PAGE | 3) for i in range(n))
    if len(xlt) % 16:
        xlt += bytes(16 - len(xlt) % 16)
    return xlt, len(xlt) // 16


def check_cqe(cqe, qp, idx, nbytes, what):
    op = cqe[63] >> 4
    qpn = struct.unpack_from(">I", cqe, 56)[0] & 0xFFFFFF
    if op == CQE_REQ_ERR:
        raise Failure("%s: error CQE, syndrome %#x vendor %#x" % (what, cqe[55], cqe[54]))
    if op != CQE_REQ:
        raise Failure("%s: CQE opcode %d, want REQ (0)" % (what, op))
    if cqe[56] != OP_RDMA_WRITE or qpn != qp.qpn:
        raise Failure("%s: CQE for WQE opcode %#x of QP %#x" % (what, cqe[56], qpn))
    counter = struct.unpack_from(">H", cqe, 60)[0]
    if counter != idx:
        raise Failure("%s: wqe_counter %d, want %d" % (what, counter, idx))
    byte_cnt = struct.unpack_from(">I", cqe, 44)[0]
    if byte_cnt != nbytes:
        raise Failure("%s: byte_cnt %d, want %d" % (what, byte_cnt, nbytes))


def run(path):
    conn = Conn(path)
    lid, max_msg = conn.hello()
    # Driver memory: CQ ring and doorbell record, two QPs' rings and records.
    drv = Memory(conn, 3 * PAGE)
    # Data: 4 pages; the source is pages 0-1 (MTT key), the destination pages 2-3 (PA key).
    data = Memory(conn, 4 * PAGE)

    caps = conn.command(CMD_QUERY_HCA_CAP, 8, name="QUERY_HCA_CAP")
    cap_lid = struct.unpack_from(">H", caps, 44)[0]
    log_cq, log_sq, log_rq = caps[28], caps[29], caps[30]
    min_page, max_page = caps[50], caps[51]
    if cap_lid != lid:
        raise Failure("QUERY_HCA_CAP LID %d, HELLO said %d" % (cap_lid, lid))
    if not (min_page <= PAGE_SHIFT <= max_page) or log_cq < 4 or log_sq < QP.LOG_SQ:
        raise Failure("capabilities too small: log cq %d sq %d, pages 2^%d..2^%d" % (log_cq, log_sq, min_page, max_page))

    pd = struct.unpack_from(">I", conn.command(CMD_ALLOC_PD, 8, name="ALLOC_PD"), 8)[0]
    cq = CQ(conn, drv, 0x000, 0x400, 4)
    qa = QP(conn, drv, 1 * PAGE, pd, cq)
    qb = QP(conn, drv, 2 * PAGE, pd, cq)
    qa.connect(lid, qb)
    qb.connect(lid, qa)

    src_off, src_len = 0, 2 * PAGE
    dst_off, dst_len = 2 * PAGE, 2 * PAGE
    xlt, octo = mtt(data.io(src_off), src_len)
    src_idx, lkey = create_mkey(conn, pd, MODE_MTT, PERM_LR | PERM_LW, data.io(src_off), src_len,
                                xlt, octo, variant=0x11)
    dst_idx, rkey = create_mkey(conn, pd, MODE_PA, PERM_LR | PERM_LW | PERM_RW, data.io(dst_off), dst_len,
                                variant=0x22)

    # WRITE 1: 6000 bytes across the source's page boundary, polled.
    n1, s1, d1 = 6000, 0x300, 0x100
    pattern = bytes((i * 7 + 3) & 0xFF for i in range(n1))
    data.write(src_off + s1, pattern)
    idx = qa.post_write(data.io(src_off + s1), lkey, n1, data.io(dst_off + d1), rkey)
    cqe = cq.wait()
    check_cqe(cqe, qa, idx, n1, "WRITE 1")
    if data.read(dst_off + d1, n1) != pattern:
        raise Failure("WRITE 1: the destination does not hold the source's bytes")
    if data.read(dst_off, d1) != bytes(d1) or data.read(dst_off + d1 + n1, 16) != bytes(16):
        raise Failure("WRITE 1: bytes outside the destination range changed")

    # WRITE 2: arm the CQ (ARM_CQ with a reply), post, wait for the COMPLETION event.
    n2 = 512
    pattern2 = os.urandom(n2)
    data.write(src_off + 0x1D00, pattern2)
    conn.arm_cq(cq.cqn, 1 << 28 | (cq.ci & 0xFFFFFF))  # sn 1, next completion, ci
    idx2 = qa.post_write(data.io(src_off + 0x1D00), lkey, n2, data.io(dst_off + 0x1E00), rkey)
    end = time.monotonic() + 10
    while not any(t == EV_COMPLETION and obj == cq.cqn for t, obj in conn.events):
        if time.monotonic() > end:
            raise Failure("no COMPLETION event for CQ %#x (events %r)" % (cq.cqn, conn.events))
        conn.sock.settimeout(max(end - time.monotonic(), 0.01))
        try:
            m = conn.receive(until_event=True)
        except socket.timeout:
            continue
        if m is not None:
            raise Failure("unexpected message %r while waiting for an event" % (m,))
    conn.sock.settimeout(20)
    cqe = cq.poll()
    if cqe is None:
        raise Failure("COMPLETION event but no CQE")
    check_cqe(cqe, qa, idx2, n2, "WRITE 2")
    if data.read(dst_off + 0x1E00, n2) != pattern2:
        raise Failure("WRITE 2: data mismatch")
    if cq.poll() is not None:
        raise Failure("an extra CQE")

    # Teardown by command, then UNMAP, then close.
    for qp in (qa, qb):
        conn.command(CMD_DESTROY_QP, 12, [(8, "I", qp.qpn)], name="DESTROY_QP")
    for i in (src_idx, dst_idx):
        conn.command(CMD_DESTROY_MKEY, 12, [(8, "I", i)], name="DESTROY_MKEY")
    conn.command(CMD_DESTROY_CQ, 12, [(8, "I", cq.cqn)], name="DESTROY_CQ")
    conn.command(CMD_DEALLOC_PD, 12, [(8, "I", pd)], name="DEALLOC_PD")
    data.unmap()
    drv.unmap()
    conn.close()
    data.release()
    drv.release()

    print("pyclient: OK: LID %d, max message %d, PD %#x, CQ %#x, QPs %#x<->%#x, lkey %#x (MTT), rkey %#x (PA)"
          % (lid, max_msg, pd, cq.cqn, qa.qpn, qb.qpn, lkey, rkey))
    print("pyclient: RDMA WRITE %d bytes (polled) and %d bytes (armed CQ, COMPLETION event) arrived; "
          "%d events, messages sent %s" % (n1, n2, len(conn.events),
                                           ", ".join("%#x:%d" % kv for kv in sorted(conn.sent.items()))))


def main():
    if len(sys.argv) != 2:
        print("usage: pyclient.py SOCKET", file=sys.stderr)
        return 2
    try:
        run(sys.argv[1])
    except (Failure, OSError) as e:
        print("pyclient: FAIL: %s" % e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
