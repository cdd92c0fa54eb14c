// The cork probe, run in a child process of its own: `node cork-probe.mjs <uws binary>`.
//
// It completes one waited `Connection: close` upgrade the way `upgradeCorked`
// does where realloc shrinks a socket in place: res.cork inside the
// WebSocket's native cork method called on the response. Where realloc moves
// the socket instead, that leaves the new socket corked and uWS aborts the
// process ("Cork buffer must not be held across event loop iterations"):
// the parent reads SIGABRT as "moved". Where the address is kept, the new
// socket is open and sends a message the client reads: exit 0, "in place".
// The answer is what the allocator does with this process's first upgrade,
// not what memory an earlier one left behind (an in-thread probe was misled
// by that on Node 24).
//
// Exit codes: 0 in place; 3 the probe could not run (message on stderr);
// killed by SIGABRT: moved.
import { createRequire } from 'node:module';
import { connect } from 'node:net';
import { setImmediate } from 'node:timers';

const require = createRequire(import.meta.url);
const uws = require(process.argv[2]);
const KEY = 'c2x1aWNlLWNvcmstcHJvYmU=';
const fail = (msg) => {
  process.stderr.write(`cork probe: ${msg}\n`);
  process.exit(3);
};
setTimeout(() => fail('did not finish within 5 s'), 5000).unref();

let port = 0;
let wsCork;
const open = (path, connection, onData) => {
  const c = connect(port, '127.0.0.1', () => {
    c.write(`GET ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: ${connection}\r\n` +
      `Sec-WebSocket-Key: ${KEY}\r\nSec-WebSocket-Version: 13\r\n\r\n`);
  });
  c.on('error', (err) => fail(err.message));
  let got = '';
  c.on('data', (d) => {
    got += d.toString('latin1');
    onData?.(got);
  });
  return c;
};

uws.App()
  .ws('/*', {
    upgrade: (res, req, context) => {
      const key = req.getHeader('sec-websocket-key');
      if (req.getUrl() === '/learn') {
        res.upgrade({ learn: true }, key, '', '', context);
        return;
      }
      let aborted = false;
      res.onAborted(() => (aborted = true));
      // Completed later, as the gateway's upgrades are.
      setImmediate(() => {
        if (aborted) fail('the probe request was aborted');
        wsCork.call(res, () => res.cork(() => res.upgrade({ learn: false }, key, '', '', context)));
      });
    },
    open: (ws) => {
      if (ws.getUserData().learn) {
        wsCork = ws.cork;
        ws.close();
        if (typeof wsCork !== 'function') fail('the uWS WebSocket has no cork method');
        open('/probe', 'close', (got) => {
          // The 101 and then the probe's message: the socket lived through its upgrade.
          if (got.includes('101') && got.includes('cork-probe-ok')) process.exit(0);
        });
        return;
      }
      ws.send('cork-probe-ok');
    },
  })
  .any('/*', (res) => res.close())
  .listen('127.0.0.1', 0, (ls) => {
    if (!ls) fail('could not listen on 127.0.0.1');
    port = uws.us_socket_local_port(ls);
    open('/learn', 'Upgrade');
  });
