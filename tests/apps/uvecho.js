// SPDX-License-Identifier: MIT
// The uvecho protocol (tests/apps/uvecho.c) in Node.js, server and client:
//   node uvecho.js server DIR
//   node uvecho.js client PORT CONNS TOTAL MAXBODY keepalive|perreq
// The server writes each body to a file with fs (libuv's pool), reads it
// back and counts the files that came back right.
'use strict';
const net = require('net');
const fs = require('fs');
const path = require('path');

const HDR = 16, LAST = 1;

// 32-bit FNV-1a, in the 64-bit word of the reply.
function fnv1a(buf) {
  let h = 0x811c9dc5;
  for (let i = 0; i < buf.length; i++) h = Math.imul(h ^ buf[i], 0x01000193);
  return BigInt(h >>> 0);
}

// Messages out of a stream of chunks: calls onMessage(flags, seq, body).
function framer(onMessage) {
  let pending = Buffer.alloc(0);
  return (chunk) => {
    pending = pending.length ? Buffer.concat([pending, chunk]) : chunk;
    while (pending.length >= HDR && pending.length >= HDR + pending.readUInt32LE(0)) {
      const len = pending.readUInt32LE(0);
      onMessage(pending.readUInt32LE(4), pending.readBigUInt64LE(8),
                pending.subarray(HDR, HDR + len));
      pending = pending.subarray(HDR + len);
    }
  };
}

function message(len, flags, word, body) {
  const m = Buffer.alloc(HDR + len);
  m.writeUInt32LE(len, 0);
  m.writeUInt32LE(flags, 4);
  m.writeBigUInt64LE(word, 8);
  body.copy(m, HDR);
  return m;
}

function server(dir) {
  let served = 0, filesOk = 0, filesBad = 0, conns = 0;
  // Synchronous, so that the files open at once stay few however fast the
  // clients are; they still take descriptor numbers sockets just gave back.
  const fileCheck = (name, body) => {
    const file = path.join(dir, name);
    fs.writeFileSync(file, body);
    if (fs.readFileSync(file).equals(body)) filesOk++; else filesBad++;
    fs.unlinkSync(file);
  };
  const srv = net.createServer((sock) => {
    const id = ++conns;
    sock.on('data', framer((flags, seq, body) => {
      const copy = Buffer.from(body);
      sock.write(message(copy.length, flags, fnv1a(copy), copy));
      fileCheck(`${id}-${seq}`, copy);
      served++;
      if (flags & LAST) sock.end();
    }));
    sock.on('error', () => {});
  });
  srv.listen(0, '127.0.0.1', () => {
    process.stdout.write(`port ${srv.address().port}\n`);
  });
  process.on('SIGTERM', () => {
    process.stdout.write(`served ${served} files_ok ${filesOk} files_bad ${filesBad}\n`,
                         () => process.exit(0));
  });
}

function client(port, nconn, total, maxbody, perreq) {
  let started = 0, done = 0, bytes = 0, given = 0, open = 0;
  let rng = 88172645463325252n;
  const rand = () => {
    rng ^= BigInt.asUintN(64, rng << 13n);
    rng ^= rng >> 7n;
    rng ^= BigInt.asUintN(64, rng << 17n);
    return rng;
  };
  const fail = (why) => { process.stderr.write(`uvecho.js: ${why}\n`); process.exit(1); };
  const openConn = () => {
    let quota = perreq ? 1 : Math.floor(total / nconn) + (given < total % nconn ? 1 : 0);
    given++;
    open++;
    let sent = null, last = false, eofDue = false;
    const sock = net.connect(port, '127.0.0.1');
    const next = () => {
      const len = Number(rand() % BigInt(maxbody + 1));
      sent = Buffer.alloc(len);
      for (let i = 0; i < len; i++) sent[i] = Number(rand() & 255n);
      started++;
      last = --quota === 0;
      sock.write(message(len, last ? LAST : 0, BigInt(started), sent));
    };
    sock.on('connect', next);
    sock.on('data', framer((flags, sum, body) => {
      if (eofDue || body.length !== sent.length || sum !== fnv1a(sent) || !body.equals(sent))
        fail(`wrong reply after ${done} requests`);
      done++;
      bytes += 2 * body.length;
      if (last) eofDue = true; else next();
    }));
    sock.on('end', () => {
      if (!eofDue) fail(`connection ended early, ${done} of ${total} done`);
      open--;
      if (perreq && given < total) openConn();
      else if (!open) {
        if (done !== total) fail(`${done} of ${total} requests answered`);
        process.stdout.write(`ok ${done} requests ${bytes} bytes\n`);
      }
    });
    sock.on('error', (e) => fail(`socket: ${e.message}`));
  };
  for (let i = 0; i < nconn && i < total; i++) openConn();
}

const [mode, ...args] = process.argv.slice(2);
if (mode === 'server' && args.length === 1) server(args[0]);
else if (mode === 'client' && args.length === 5)
  client(Number(args[0]), Number(args[1]), Number(args[2]), Number(args[3]), args[4] === 'perreq');
else {
  process.stderr.write('usage: uvecho.js server DIR | client PORT CONNS TOTAL MAXBODY keepalive|perreq\n');
  process.exit(2);
}
