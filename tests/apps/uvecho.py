# SPDX-License-Identifier: MIT
"""The uvecho protocol (tests/apps/uvecho.c) in Python's asyncio, on uvloop
(a current libuv, which batches its epoll_ctl calls through io_uring) when
it is importable, or on asyncio's own loop:

    python3 uvecho.py server DIR
    python3 uvecho.py client PORT CONNS TOTAL MAXBODY keepalive|perreq

Prints what uvecho.c prints; the first line of stderr names the loop.
"""

import asyncio
import os
import random
import signal
import struct
import sys

HDR = struct.Struct("<IIQ")
LAST = 1


def fnv1a(data):
    h = 0x811C9DC5
    for b in data:
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return h


def new_loop():
    try:
        import uvloop
    except ImportError:
        print("loop asyncio", file=sys.stderr)
        return asyncio.new_event_loop()
    print(f"loop uvloop {uvloop.__version__}", file=sys.stderr)
    return uvloop.new_event_loop()


async def read_message(reader):
    try:
        head = await reader.readexactly(HDR.size)
    except asyncio.IncompleteReadError as e:
        if e.partial:
            raise
        return None
    length, flags, word = HDR.unpack(head)
    return flags, word, await reader.readexactly(length)


async def server(directory):
    counts = {"served": 0, "ok": 0, "bad": 0, "conns": 0}

    def file_check(name, body):
        # Plain blocking files on the loop's thread: they take the numbers
        # sockets just gave back.
        path = os.path.join(directory, name)
        with open(path, "wb") as f:
            f.write(body)
        with open(path, "rb") as f:
            counts["ok" if f.read() == body else "bad"] += 1
        os.unlink(path)

    async def handle(reader, writer):
        counts["conns"] += 1
        conn = counts["conns"]
        try:
            while True:
                msg = await read_message(reader)
                if msg is None:
                    break
                flags, seq, body = msg
                writer.write(HDR.pack(len(body), flags, fnv1a(body)) + body)
                file_check(f"{conn}-{seq}", body)
                counts["served"] += 1
                if flags & LAST:
                    await writer.drain()
                    break
        finally:
            writer.close()

    srv = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=511)
    print(f"port {srv.sockets[0].getsockname()[1]}", flush=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    print(f"served {counts['served']} files_ok {counts['ok']} files_bad {counts['bad']}",
          flush=True)


async def client(port, nconn, total, maxbody, perreq):
    state = {"started": 0, "done": 0, "bytes": 0, "given": 0}
    rng = random.Random(88172645463325252)

    async def one_connection(quota):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        while quota:
            quota -= 1
            length = rng.randrange(maxbody + 1)
            body = rng.randbytes(length)
            state["started"] += 1
            writer.write(HDR.pack(length, 0 if quota else LAST, state["started"]) + body)
            msg = await read_message(reader)
            if msg is None or msg[2] != body or msg[1] != fnv1a(body):
                sys.exit(f"uvecho.py: wrong reply after {state['done']} requests")
            state["done"] += 1
            state["bytes"] += 2 * length
        if await reader.read(1) != b"":
            sys.exit("uvecho.py: no EOF after the last reply")
        writer.close()

    async def worker(i):
        if perreq:
            while state["given"] < total:
                state["given"] += 1
                await one_connection(1)
        else:
            await one_connection(total // nconn + (i < total % nconn))

    await asyncio.gather(*(worker(i) for i in range(min(nconn, total))))
    if state["done"] != total:
        sys.exit(f"uvecho.py: {state['done']} of {total} requests answered")
    print(f"ok {state['done']} requests {state['bytes']} bytes", flush=True)


def main():
    args = sys.argv[1:]
    loop = new_loop()
    if len(args) == 2 and args[0] == "server":
        loop.run_until_complete(server(args[1]))
    elif len(args) == 6 and args[0] == "client":
        loop.run_until_complete(client(int(args[1]), int(args[2]), int(args[3]), int(args[4]),
                                       args[5] == "perreq"))
    else:
        sys.exit("usage: uvecho.py server DIR | client PORT CONNS TOTAL MAXBODY keepalive|perreq")


if __name__ == "__main__":
    main()
