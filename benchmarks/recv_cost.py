"""CPU per `recv` of one small TCP segment on loopback, with every read of a wake-up batched.

Not a test: a measurement, for what a stream reader cannot go under on a machine whatever its wake-up
pattern. N connected loopback socket pairs; each round the sender writes one llama-server-shaped token
frame to every socket, waits `--gap-ms` (the frames arrive), then one `epoll.poll(0)` and one read per
ready socket; the reader's CPU (`time.process_time`, user + sys) around the poll and reads is summed
over rounds and divided by the reads. `--stamps` turns on SO_TIMESTAMPNS and reads with `recvmsg`
(what `client_overhead.py`'s `floor-epoll` does).

    python benchmarks/recv_cost.py [--sockets 64] [--rounds 300] [--gap-ms 2]
"""

from __future__ import annotations

import argparse
import json
import select
import socket
import time

FRAME = b'2a\r\ndata: {"choices":[{"text":" x"}]}\n\n\r\n'
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)


def measure(sockets: int, rounds: int, gap_ms: float, stamps: bool) -> float:
    """µs of reader CPU per read, the sender in the same process between the reader's timed spans."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    readers = [socket.create_connection(("127.0.0.1", port)) for _ in range(sockets)]
    writers = [server.accept()[0] for _ in range(sockets)]
    ep = select.epoll()
    by_fd = {}
    for r in readers:
        r.setblocking(False)
        if stamps:
            r.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        ep.register(r.fileno(), select.EPOLLIN)
        by_fd[r.fileno()] = r
    cpu, reads = 0.0, 0
    try:
        for _ in range(rounds):
            for w in writers:
                w.send(FRAME)
            time.sleep(gap_ms / 1e3)
            c0 = time.process_time()
            ready = ep.poll(0)
            for fd, _ in ready:
                if stamps:
                    by_fd[fd].recvmsg(65536, 64)
                else:
                    by_fd[fd].recv(65536)
            cpu += time.process_time() - c0
            reads += len(ready)
    finally:
        for s in (*readers, *writers, server):
            s.close()
        ep.close()
    return cpu * 1e6 / max(reads, 1)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sockets", type=int, default=64)
    p.add_argument("--rounds", type=int, default=300)
    p.add_argument("--gap-ms", type=float, default=2.0, help="wait after the writes, before the reads")
    args = p.parse_args()
    out = {f"{'recvmsg, SO_TIMESTAMPNS' if stamps else 'recv'}": measure(args.sockets, args.rounds, args.gap_ms, stamps)
           for stamps in (False, True)}
    print(json.dumps({"us_per_read": out, "sockets": args.sockets, "rounds": args.rounds}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
