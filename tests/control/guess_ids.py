# SPDX-License-Identifier: MIT
"""A third process that tries to obtain other connections' circuits from
shuntd by guessing ids (tests/control/test_hostile.py). It speaks the
control protocol (include/shunt/proto.h, docs/protocol.md) itself on its
own session and prints one JSON line per request: what it asked, the reply
status and the descriptors the reply carried, by what /proc says they are.

    guess_ids.py SOCKET MAX_ID [ID...]

asks about ids 1..MAX_ID and the given ones (real ids of others, from
`shunt status`): ACCEPT on every listener id with a listening socket of its
own, LINK to every session, CLOSE and DOWNGRADE of both ends of every
circuit, LINK_NEXT, and HELLO claiming every id as a fork ticket's name
(and its parent's session) with secret 0.
"""

import array
import json
import os
import socket
import struct
import sys

VERSION = 7  # SHUNT_PROTO_VERSION
HELLO, ACCEPT, CLOSE, LINK, LINK_NEXT, DOWNGRADE = 1, 5, 6, 12, 13, 16
REPLY = 0x8000
HELLO_CLAIM = 1
CLOSE_SHARED = 1
HDR = struct.Struct("<HHIIi")  # type, version, len, seq, status
MSG_MAX, MAX_FDS = 512, 5


class Session:
    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock.connect(path)
        self.seq = 0

    def ask(self, mtype, body=b"", fds=()):
        """Send one request; return (reply status, reply body, received fds)."""
        self.seq += 1
        msg = HDR.pack(mtype, VERSION, HDR.size + len(body), self.seq, 0) + body
        anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
        self.sock.sendmsg([msg], anc)
        data, anc, _, _ = self.sock.recvmsg(MSG_MAX, socket.CMSG_SPACE(MAX_FDS * 4))
        got = []
        for level, kind, payload in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                a = array.array("i")
                a.frombytes(payload[:len(payload) - len(payload) % 4])
                got.extend(a)
        rtype, _, _, seq, status = HDR.unpack_from(data)
        assert rtype == mtype | REPLY and seq == self.seq, (rtype, seq, self.seq)
        return status, data[HDR.size:], got


def describe_fds(fds):
    """What each received descriptor is (then closed)."""
    names = []
    for fd in fds:
        try:
            names.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError as e:
            names.append(f"? {e}")
        os.close(fd)
    return names


def report(req, ident, status, fds, **extra):
    print(json.dumps(dict(req=req, id=ident, status=status, fds=describe_fds(fds), **extra)),
          flush=True)


def hello(sess, flags=0, ticket=0, secret=0, parent=0):
    status, body, fds = sess.ask(HELLO, struct.pack("<IIQQQ", flags, 0, ticket, secret, parent))
    session = claim = None
    if status == 0:
        session, _, claim, _ = struct.unpack_from("<QIiQ", body)
    return status, session, claim, fds


def main():
    path, max_id = sys.argv[1], int(sys.argv[2])
    ids = sorted(set(range(1, max_id + 1)) | {int(a) for a in sys.argv[3:]})
    sess = Session(path)
    status, me, _, fds = hello(sess)
    report("HELLO", 0, status, fds, session=me)

    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    for i in ids:
        status, _, fds = sess.ask(ACCEPT, struct.pack("<QII", i, 0, 0), [listener.fileno()])
        report("ACCEPT", i, status, fds)
        if i != me:
            status, _, fds = sess.ask(LINK, struct.pack("<Q", i))
            report("LINK", i, status, fds)
        for end in (0, 1):
            status, _, fds = sess.ask(CLOSE, struct.pack("<QII", i, end, CLOSE_SHARED))
            report("CLOSE", i, status, fds, end=end)
        status, _, fds = sess.ask(DOWNGRADE, struct.pack("<Q", i), [tcp.fileno()])
        report("DOWNGRADE", i, status, fds)
    status, _, fds = sess.ask(LINK_NEXT, struct.pack("<Q", 0))
    report("LINK_NEXT", 0, status, fds)
    for i in ids:
        other = Session(path)
        # The id as the ticket's name and as its parent's session: shuntd reads that
        # session's requests before it refuses.
        status, _, claim, fds = hello(other, HELLO_CLAIM, i, 0, i)
        report("CLAIM", i, status, fds, claim=claim)
        other.sock.close()


if __name__ == "__main__":
    main()
