"""A delay line for kernels without sch_netem: holds every packet an NFQUEUE hands it.

`python3 netqueue.py QUEUE DELAY_MS LOSS_PERCENT` binds netfilter queue QUEUE (in the network
namespace it runs in), holds each packet DELAY_MS before accepting it and drops LOSS_PERCENT of
them, so a rule `queue num QUEUE` on a host's input (or output) adds DELAY_MS to every round trip through
that host, as `tc qdisc ... netem delay` would. It prints `ready` once bound (packets queued
before that would be dropped) and runs until SIGTERM. It speaks nfnetlink directly: a few
fixed structs, no library to install.
"""

from __future__ import annotations

import collections
import os
import random
import select
import signal
import socket
import struct
import sys
import time

NETLINK_NETFILTER = 12
NFNL_SUBSYS_QUEUE = 3
NFQNL_MSG_PACKET = 0
NFQNL_MSG_VERDICT = 1
NFQNL_MSG_CONFIG = 2
NFQNL_MSG_VERDICT_BATCH = 3  # one verdict for every queued packet with an id up to the given one
NFQNL_CFG_CMD_BIND = 1
NFQA_CFG_CMD = 1
NFQA_CFG_PARAMS = 2
NFQA_CFG_QUEUE_MAXLEN = 3
NFQNL_COPY_META = 1
NFQA_PACKET_HDR = 1
NFQA_VERDICT_HDR = 2
NF_DROP = 0
NF_ACCEPT = 1
NLM_F_REQUEST = 1
NLM_F_ACK = 4
NLMSG_ERROR = 2
NLMSG_HDR = struct.Struct("=IHHII")  # len, type, flags, seq, pid
NFGENMSG = struct.Struct("!BBH")  # family, version, queue number (big endian)
NLATTR = struct.Struct("=HH")  # len, type
QUEUE_MAXLEN = 65536


def align4(n: int) -> int:
    return (n + 3) & ~3


def attr(kind: int, payload: bytes) -> bytes:
    raw = NLATTR.pack(NLATTR.size + len(payload), kind) + payload
    return raw + b"\0" * (align4(len(raw)) - len(raw))


def message(msg_type: int, flags: int, queue: int, attrs: bytes, seq: int = 0) -> bytes:
    body = NFGENMSG.pack(socket.AF_UNSPEC, 0, queue) + attrs
    kind = (NFNL_SUBSYS_QUEUE << 8) | msg_type
    return NLMSG_HDR.pack(NLMSG_HDR.size + len(body), kind, flags, seq, 0) + body


def configure(sock: socket.socket, queue: int, seq: int, attrs: bytes) -> None:
    """Sends one config message and raises if the kernel's ack carries an error."""
    sock.send(message(NFQNL_MSG_CONFIG, NLM_F_REQUEST | NLM_F_ACK, queue, attrs, seq))
    data = sock.recv(65536)
    _, kind, _, _, _ = NLMSG_HDR.unpack_from(data)
    if kind == NLMSG_ERROR:
        (err,) = struct.unpack_from("=i", data, NLMSG_HDR.size)
        if err != 0:
            raise OSError(-err, f"nfqueue config: {os.strerror(-err)}")


def bind(queue: int) -> socket.socket:
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    sock.bind((0, 0))
    configure(sock, queue, 1, attr(NFQA_CFG_CMD, struct.pack("!BxH", NFQNL_CFG_CMD_BIND, 0)))
    configure(sock, queue, 2, attr(NFQA_CFG_PARAMS, struct.pack("!IB", 0, NFQNL_COPY_META)))
    configure(sock, queue, 3, attr(NFQA_CFG_QUEUE_MAXLEN, struct.pack("!I", QUEUE_MAXLEN)))
    return sock


def packet_ids(data: bytes) -> list[int]:
    """The packet ids of the NFQNL_MSG_PACKET messages in one netlink read."""
    ids = []
    off = 0
    while off + NLMSG_HDR.size <= len(data):
        length, kind, _, _, _ = NLMSG_HDR.unpack_from(data, off)
        if length < NLMSG_HDR.size:
            break
        if kind == (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET:
            a = off + NLMSG_HDR.size + NFGENMSG.size
            while a + NLATTR.size <= off + length:
                alen, akind = NLATTR.unpack_from(data, a)
                if alen < NLATTR.size:
                    break
                if akind & 0x7FFF == NFQA_PACKET_HDR:
                    ids.append(struct.unpack_from("!I", data, a + NLATTR.size)[0])
                a += align4(alen)
        off += align4(length)
    return ids


def verdict(
    sock: socket.socket, queue: int, packet_id: int, decision: int, batch: bool = False
) -> None:
    hdr = attr(NFQA_VERDICT_HDR, struct.pack("!II", decision, packet_id))
    kind = NFQNL_MSG_VERDICT_BATCH if batch else NFQNL_MSG_VERDICT
    sock.send(message(kind, NLM_F_REQUEST, queue, hdr))


def drain(sock: socket.socket) -> list[int]:
    """The ids of every packet waiting on the socket, without blocking."""
    ids: list[int] = []
    while True:
        try:
            ids += packet_ids(sock.recv(1 << 20, socket.MSG_DONTWAIT))
        except BlockingIOError:
            return ids


def run(queue: int, delay_ms: float, loss_percent: float) -> None:
    sock = bind(queue)
    print("ready", flush=True)
    held: collections.deque[tuple[float, int]] = collections.deque()
    delay = delay_ms / 1000.0
    while True:
        now = time.monotonic()
        last = None
        while held and held[0][0] <= now:
            last = held.popleft()[1]
        if last is not None:
            # Ids grow and the delay is constant, so every packet up to `last` is due; the
            # dropped ones already had their verdict.
            verdict(sock, queue, last, NF_ACCEPT, batch=True)
        wait = max(0.0, held[0][0] - now) if held else None
        readable, _, _ = select.select([sock], [], [], wait)
        if not readable:
            continue
        arrived = time.monotonic()
        for pid in drain(sock):
            if random.random() * 100.0 < loss_percent:
                verdict(sock, queue, pid, NF_DROP)
            else:
                held.append((arrived + delay, pid))


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    queue, delay_ms, loss = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
    run(queue, delay_ms, loss)


if __name__ == "__main__":
    main()
