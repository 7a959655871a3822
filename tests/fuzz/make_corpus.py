#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Write the seed corpus of fuzz_proto: conversations of two processes with
shuntd, in the harness's input format (tests/fuzz/fuzz_proto.c), one file per
scenario, each reaching a different part of the daemon. Ids are predictable:
every run starts a fresh daemon state whose ids count from 1 (sessions 1 and
2, then links, listeners, circuits and tickets in the order they are made),
and every fork ticket is named by its parent (7, 8...) with the secret
0x5a5a5a5a5a5a5a5a.

    tests/fuzz/make_corpus.py [DIR]    (default: tests/fuzz/corpus/fuzz_proto)
"""
import os
import socket
import struct
import sys

VERSION = 7  # SHUNT_PROTO_VERSION
REPLY = 0x8000
(HELLO, LISTEN, UNLISTEN, CONNECT, ACCEPT, CLOSE, STATUS, STATUS_SESSION,
 STATUS_LISTENER, STATUS_CONN, STATUS_END, LINK, LINK_NEXT, FORK, FORK_DONE,
 DOWNGRADE, STATUS_POLICY, UNREPAIR, WITHDRAW, EXEC, EXEC_KEEP, EXEC_DONE,
 EXEC_NEXT) = range(1, 24)  # include/shunt/proto.h
SECRET = 0x5a5a5a5a5a5a5a5a

# Descriptor kinds (enum fd_kind).
POOL0, POOL1, POOL2, POOL3, TCP4, TCP6, TCP4_BOUND, TCP6_BOUND, KEPT, UDP, EVENTFD, UNIX = range(12)
A, B = 0, 1

_seq = [0]


def hdr(mtype, length, status=0, version=VERSION, seq=None):
    if seq is None:
        _seq[0] += 1
        seq = _seq[0]
    return struct.pack('<HHIIi', mtype, version, length, seq, status)


def wire(ip, port):
    if ':' in ip:
        return struct.pack('<HHIII16s', socket.AF_INET6, port, 0, 0, 0, socket.inet_pton(socket.AF_INET6, ip))
    return struct.pack('<HHIII16s', socket.AF_INET, port, 0, 0, 0, socket.inet_aton(ip))


def msg(mtype, body=b'', **kw):
    return hdr(mtype, 16 + len(body), **kw) + body


def hello(flags=0, ticket=0, secret=0, parent=0):
    return msg(HELLO, struct.pack('<IIQQQ', flags, 0, ticket, secret, parent))


def listen(lid=0):
    return msg(LISTEN, struct.pack('<Q', lid))


UNLISTEN_SHUTDOWN, UNLISTEN_UNANSWERED, UNLISTEN_COUNTED = 1, 2, 4


def unlisten(lid, flags=0, after=0):
    return msg(UNLISTEN, struct.pack('<QII', lid, flags, after))


def connect(ip, port, flags=0):
    """Port 1..4 reaches the harness's listening socket 0..3."""
    return msg(CONNECT, wire(ip, port) + struct.pack('<II', flags, 0))


def accept(lid):
    return msg(ACCEPT, struct.pack('<Q', lid))


def close(cid, end, flags=0):
    return msg(CLOSE, struct.pack('<QII', cid, end, flags))


def status():
    return msg(STATUS, struct.pack('<II', 0, 0))


def link(partner):
    return msg(LINK, struct.pack('<Q', partner))


def link_next():
    return msg(LINK_NEXT, struct.pack('<Q', 0))


def fork(name):
    return msg(FORK, struct.pack('<QQ', name, SECRET))


def fork_done(ticket, pid):
    return msg(FORK_DONE, struct.pack('<QiI', ticket, pid, 0))


def downgrade(cid):
    return msg(DOWNGRADE, struct.pack('<Q', cid))


def exec_(kind=0):
    return msg(EXEC, struct.pack('<II', kind, 0))


def exec_keep(ticket, cid, end, lid=0, flags=0):
    return msg(EXEC_KEEP, struct.pack('<QQQII', ticket, cid, lid, end, flags))


def exec_done(ticket, pid=0):
    return msg(EXEC_DONE, struct.pack('<QiI', ticket, pid, 0))


def exec_next():
    return msg(EXEC_NEXT)


def send(peer, record, fds=()):
    assert len(fds) <= 7
    return bytes([peer | len(fds) << 1]) + bytes(fds) + struct.pack('<H', len(record)) + record


def poke(which, offset, value):
    return bytes([12 << 4]) + struct.pack('<BHQ', which, offset, value)


def restart(peer):
    return bytes([14 << 4 | peer])


# Offsets in the circuit's control page (include/shunt/circuit.h).
END = [128, 128 + 512]
HOLDERS, ROUTE = 28, 64
RING = [1152, 1152 + 256]
TAIL, HEAD = 0, 128


def scenarios():
    s = {}
    hellos = send(A, hello()) + send(B, hello())              # links 3, 4
    # B connects to A's listener 5 on 127.0.0.1: circuit 6.
    setup = hellos + send(A, listen(), [POOL0]) + send(B, connect('127.0.0.1', 1), [TCP4])
    s['hello'] = hellos
    s['connect-accept-close'] = (setup + send(A, accept(5), [POOL0]) +
                                 send(B, close(6, 0)) + send(A, close(6, 1, 1)))
    s['connect-v6'] = (hellos + send(A, listen(), [POOL1]) + send(B, connect('::1', 2), [TCP6]) +
                       send(A, accept(5), [POOL1]) + send(A, unlisten(5)))
    s['connect-dual-stack'] = (hellos + send(A, listen(), [POOL3]) +
                               send(B, connect('127.0.0.1', 4), [TCP4_BOUND]) +
                               send(B, connect('::ffff:127.0.0.1', 4), [TCP6]) +
                               send(A, accept(5), [POOL3]) + send(B, status()))
    s['connect-wildcard'] = (hellos + send(A, listen(), [POOL2]) + send(B, connect('0.0.0.0', 3), [TCP4]) +
                             send(B, connect('127.0.0.1', 9), [TCP4]))
    # Backlog 1: two fit the accept queue, the third waits in the SYN queue.
    s['syn-queue'] = (setup + send(B, connect('127.0.0.1', 1), [TCP4]) +
                      send(B, connect('127.0.0.1', 1), [TCP4]) + send(A, accept(5), [POOL0]) +
                      send(B, close(8, 0)) + send(A, listen(5), [POOL0]) +
                      send(A, unlisten(5, 1)))
    s['link'] = (setup + send(A, accept(5), [POOL0]) + send(B, link(1)) + send(A, link_next()) +
                 send(A, link_next()) + send(A, link(1)) + restart(B) + send(A, link_next()))
    s['fork-claim'] = (setup + send(A, accept(5), [POOL0]) + send(A, fork(7)) +
                       send(B, hello(1, 7, SECRET, 1)) + send(B, close(6, 1, 1)) +
                       send(A, close(6, 1, 1)))
    s['fork-done'] = (setup + send(B, fork(7)) + send(B, fork_done(7, 0)) + send(B, fork(8)) +
                      send(B, fork_done(8, 1)) + send(A, hello(1, 8, 1, 2)))
    s['downgrade'] = (setup + send(A, accept(5), [POOL0]) + send(B, downgrade(6), [KEPT]) +
                      send(A, downgrade(6), [KEPT]) + send(A, status()))
    s['downgrade-unaccepted'] = setup + send(B, downgrade(6), [KEPT]) + send(B, downgrade(99), [TCP4])
    s['poke'] = (setup + send(A, accept(5), [POOL0]) +
                 poke(0, END[0] + ROUTE, 1 << 16 | 9) + poke(0, END[1] + ROUTE, 3 << 16 | 9) +
                 poke(0, END[0] + HOLDERS, 0) + poke(0, RING[1] + TAIL, 100) +
                 send(B, downgrade(6), [KEPT]) + send(A, close(6, 1)) + restart(B))
    s['status'] = setup + send(B, fork(7)) + send(A, status())
    # The harness's policy: 127.0.0.2 is refused, 0.0.0.0 left to the kernel, and
    # the fourth circuit (12 KiB each) passes the tenant's max_memory of 40K.
    s['policy'] = (hellos + send(A, listen(), [POOL2]) + send(B, connect('127.0.0.2', 3), [TCP4]) +
                   send(B, connect('0.0.0.0', 3), [TCP4]) +
                   b''.join(send(B, connect('127.0.0.1', 3), [TCP4]) for _ in range(4)) +
                   send(A, accept(5), [POOL2]) + send(B, close(6, 0)))
    # Malformed records: each is refused, and the session goes on.
    s['malformed'] = (hellos +
                      send(A, msg(CONNECT, b'\0' * 8)) +                       # short for its type
                      send(A, hello()[:-1]) +                                   # shorter than claimed
                      send(A, msg(HELLO, b'\0' * 24, version=1)) +              # another version
                      send(A, msg(LISTEN, b'\0' * 8, status=-1), [POOL0]) +    # a request with a status
                      send(A, msg(HELLO | REPLY, b'\0' * 24)) +                 # a reply
                      send(A, msg(STATUS_END, b'\0' * 48)) +                     # a status record
                      send(A, msg(99, b'\0' * 8)) +                             # unknown type
                      send(A, listen()) +                                       # its socket missing
                      send(A, hello(), [EVENTFD]) +                             # a descriptor too many
                      send(A, connect('127.0.0.1', 1), [UDP]) +                 # the wrong socket
                      send(A, accept(5), [UNIX]) +
                      send(A, hello(), [TCP4] * 6) +                            # more than 5
                      send(A, hello() + b'\0' * 600) +                          # longer than any
                      send(A, b'\x01\x00') +                                    # not a header
                      send(A, b'', [EVENTFD]) +                                 # empty, with a descriptor
                      send(A, hello()))
    # B keeps its end (and asks for a listener it does not hold) for an exec, then
    # its session goes as at exec; the next one claims the ticket (the harness is
    # one process: same pid) and fetches what it kept.
    s['exec-claim'] = (setup + send(A, accept(5), [POOL0]) + send(B, exec_()) +
                       send(B, exec_keep(7, 6, 0), [KEPT]) + send(B, exec_keep(7, 0, 0, 5), [POOL0]) +
                       send(B, exec_keep(99, 6, 0), [KEPT]) + restart(B) + send(B, hello(2)) +
                       send(B, exec_next()) + send(B, exec_next()) + send(B, close(6, 0, 1)))
    # An exec that failed, and spawns: one that failed, one whose pid is not a child.
    s['exec-done'] = (setup + send(B, exec_()) + send(B, exec_keep(7, 6, 0), [KEPT]) +
                      send(B, exec_done(7)) + send(A, exec_(1)) + send(A, exec_done(8, 0)) +
                      send(A, exec_(1)) + send(A, listen(5), [POOL0]) +
                      send(A, exec_keep(9, 0, 0, 5), [POOL0]) + send(A, exec_done(9, 1)) +
                      send(A, exec_(7)) + send(B, hello(2)))
    # A family's last close (A's, counting 2) waits for the child's, unanswered.
    s['family-close'] = (hellos + send(A, listen(), [POOL0]) + send(A, fork(7)) +
                         send(B, hello(1, 7, SECRET, 1)) +
                         send(A, unlisten(5, UNLISTEN_COUNTED, 2)) +
                         send(B, unlisten(5, UNLISTEN_COUNTED | UNLISTEN_UNANSWERED)))
    return s


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), 'corpus', 'fuzz_proto')
    os.makedirs(out, exist_ok=True)
    for name, data in scenarios().items():
        with open(os.path.join(out, name), 'wb') as f:
            f.write(data)


if __name__ == '__main__':
    main()
