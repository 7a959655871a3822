// SPDX-License-Identifier: MIT
// A Node.js server at its descriptor limit, soft == hard (`ulimit -n`), and
// a client process that connects once the server has filled its table:
// libuv's EMFILE trick (close a reserved descriptor, accept, close the
// connection, reopen the reserve) must end the connection, so that the
// client sees it close. Under shunt before stop 33 the accept said EMFILE
// again (a reply from shuntd had no room), libuv retried without end, and
// the client timed out. Usage: node uvemfile.js
const net = require('net'), fs = require('fs'), cp = require('child_process');

if (process.argv[2] === 'client') {
  // After the server has filled its table.
  setTimeout(() => {
    const c = net.connect(+process.argv[3], '127.0.0.1');
    c.on('close', () => { console.log('client: closed'); process.exit(0); });
    c.on('error', (e) => console.log('client: error', e.code));
  }, 500);
  setTimeout(() => { console.log('client: timeout'); process.exit(1); }, 10000);
} else {
  const srv = net.createServer((s) => { console.log('server: a connection at the limit'); s.destroy(); });
  srv.listen(0, '127.0.0.1', () => {
    const child = cp.spawn(process.execPath, [__filename, 'client', srv.address().port],
                           { stdio: ['ignore', 'inherit', 'inherit'] });
    const fds = [];
    child.on('exit', (code) => {
      console.log('server: the client exited with', code);
      for (const fd of fds) fs.closeSync(fd);
      srv.close();
      process.exitCode = code;
    });
    setTimeout(() => {
      try { for (;;) fds.push(fs.openSync('/dev/null', 'r')); } catch (e) { console.log('server: filled up', e.code); }
    }, 100);
  });
}
