#!/usr/bin/env python3
"""tcp_bandwidth.py: the raw TCP bandwidth between two hosts, as the floor
under MPI's: one connection, 4 MiB writes, what the receiver counts per
second (the median of a few timed transfers after one warm-up).

    tcp_bandwidth.py serve ADDR PORT            (on the receiving host)
    tcp_bandwidth.py send ADDR PORT [MIB] [REPS] (on the sending host; prints GB/s)

The receiver acknowledges each transfer with one byte, so the sender's clock
covers the data's arrival, not only its hand-over to the kernel.
"""
import socket
import statistics
import sys
import time

CHUNK = 4 << 20


def serve(addr, port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, port))
    s.listen(1)
    c, _ = s.accept()
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    while True:
        head = c.recv(8)
        if len(head) < 8:
            return
        want = int.from_bytes(head, "little")
        if want == 0:
            return
        got = 0
        while got < want:
            n = c.recv_into(view, min(CHUNK, want - got))
            if n == 0:
                return
            got += n
        c.sendall(b"k")


def send(addr, port, mib, reps):
    total = mib << 20
    c = socket.create_connection((addr, port))
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    data = memoryview(bytearray(CHUNK))
    rates = []
    for i in range(reps + 1):  # the first warms up
        t0 = time.perf_counter()
        c.sendall(total.to_bytes(8, "little"))
        left = total
        while left > 0:
            n = min(CHUNK, left)
            c.sendall(data[:n])
            left -= n
        if c.recv(1) != b"k":
            sys.exit("tcp_bandwidth.py: the receiver went away")
        if i:
            rates.append(total / (time.perf_counter() - t0) / 1e9)
    c.sendall((0).to_bytes(8, "little"))
    print("%.3f" % statistics.median(rates))


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "serve":
        serve(sys.argv[2], int(sys.argv[3]))
    elif len(sys.argv) >= 4 and sys.argv[1] == "send":
        send(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]) if len(sys.argv) > 4 else 256,
             int(sys.argv[5]) if len(sys.argv) > 5 else 5)
    else:
        sys.exit(__doc__)
