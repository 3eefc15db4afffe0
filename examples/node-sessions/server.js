#!/usr/bin/env node
// node-sessions: a stateful actor in Node.js. Sessions live in the V8 heap,
// so a restored checkpoint still has every session while a cold boot starts
// empty. Standard library only (node:http, node:crypto).
//
//   GET    /healthz               -> "ok" (the wakeup probe)
//   GET    /sessions              -> [{"id": "...", "items": N, "hits": N}, ...]
//   GET    /sessions/ID           -> {"id", "hits", "items": [...], "created"};
//                                     counts a hit first (404 if unknown)
//   POST   /sessions/ID/items     body = item text -> 201 {"id", "index", "items"};
//                                     creates the session when new
//   DELETE /sessions/ID           -> 204 (404 if unknown)
//   GET    /checksum              -> {"mb": N, "sha256": "..."} of the ballast
//
// With $STATE_MB set to N > 0 the process holds N MiB of live state at
// start: an array of 1 KiB random strings (the "ballast"), as python-notes
// does, so the benchmarks can weigh a V8 heap of that size. /checksum hashes
// it in order, so a restore that lost or damaged any of it answers another
// digest.
//
// Listens on 0.0.0.0:$PORT (default 8080); exits on SIGTERM.
'use strict';

const crypto = require('node:crypto');
const http = require('node:http');

// Bodies above this are refused: items are short, and memory is the state
// every checkpoint carries.
const MAX_BODY = 1 << 20;
// Session ids are URL path segments; the limit keeps one id from being a
// way to store megabytes.
const ID_RE = /^[A-Za-z0-9_.-]{1,128}$/;

// sessions maps id -> {hits, items, created}; Maps keep insertion order.
const sessions = new Map();

// makeBallast returns mb MiB of distinct 1 KiB hex strings made from one
// random buffer: random, so neither zero-page exclusion nor compression
// makes them cheap; one string per KiB, so the heap holds mb*1024 objects
// like an application's data rather than one large buffer.
function makeBallast(mb) {
  const out = new Array(mb * 1024);
  const chunk = 1 << 20; // random bytes drawn per call: 2 MiB of hex
  for (let i = 0; i < out.length; ) {
    const buf = crypto.randomBytes(chunk);
    for (let off = 0; off < chunk && i < out.length; off += 512, i++) {
      // Each call makes a new string of its own (no view of buf).
      out[i] = buf.toString('hex', off, off + 512);
    }
  }
  return out;
}

function checksum(ballast) {
  const h = crypto.createHash('sha256');
  for (const s of ballast) h.update(s);
  return h.digest('hex');
}

const STATE_MB = parseInt(process.env.STATE_MB || '0', 10) || 0;
const BALLAST = makeBallast(STATE_MB);

function send(res, status, body, type) {
  res.writeHead(status, {
    'Content-Type': type || 'application/json',
    'Content-Length': Buffer.byteLength(body),
  });
  res.end(body);
}

function json(res, status, obj) {
  send(res, status, JSON.stringify(obj) + '\n');
}

// readBody calls done(text) with the request body, or answers 413 itself.
function readBody(req, res, done) {
  const chunks = [];
  let size = 0;
  let refused = false;
  req.on('data', (c) => {
    if (refused) return;
    size += c.length;
    if (size > MAX_BODY) {
      refused = true;
      json(res, 413, { error: `body larger than ${MAX_BODY} bytes` });
      return;
    }
    chunks.push(c);
  });
  req.on('end', () => {
    if (!refused) done(Buffer.concat(chunks).toString('utf8'));
  });
}

function handle(req, res) {
  const url = new URL(req.url, 'http://actor');
  const parts = url.pathname.split('/').filter((p) => p !== '');
  const method = req.method;

  if (method === 'GET' && url.pathname === '/healthz') {
    return send(res, 200, 'ok\n', 'text/plain; charset=utf-8');
  }
  if (method === 'GET' && url.pathname === '/checksum') {
    return json(res, 200, { mb: STATE_MB, sha256: checksum(BALLAST) });
  }
  if (parts[0] !== 'sessions') {
    return json(res, 404, { error: 'not found' });
  }
  if (parts.length === 1 && method === 'GET') {
    const list = [];
    for (const [id, s] of sessions) list.push({ id, items: s.items.length, hits: s.hits });
    return json(res, 200, list);
  }
  const id = parts[1];
  if (parts.length < 2 || parts.length > 3 || !ID_RE.test(id)) {
    return json(res, 400, { error: 'want /sessions/ID or /sessions/ID/items, ID of [A-Za-z0-9_.-]{1,128}' });
  }
  if (parts.length === 3) {
    if (parts[2] !== 'items') return json(res, 404, { error: 'not found' });
    if (method !== 'POST') return json(res, 405, { error: 'POST an item' });
    return readBody(req, res, (text) => {
      let s = sessions.get(id);
      if (!s) {
        s = { hits: 0, items: [], created: new Date().toISOString() };
        sessions.set(id, s);
      }
      s.items.push(text);
      json(res, 201, { id, index: s.items.length - 1, items: s.items.length });
    });
  }
  const s = sessions.get(id);
  if (method === 'GET') {
    if (!s) return json(res, 404, { error: `no session ${id}` });
    s.hits++;
    return json(res, 200, { id, hits: s.hits, items: s.items, created: s.created });
  }
  if (method === 'DELETE') {
    if (!sessions.delete(id)) return json(res, 404, { error: `no session ${id}` });
    return send(res, 204, '', 'text/plain; charset=utf-8');
  }
  return json(res, 405, { error: 'GET or DELETE a session' });
}

const server = http.createServer(handle);
// A connection open at checkpoint time is gone after a restore (its peer
// never moved with it); the reset that follows is expected.
server.on('clientError', (err, socket) => {
  if (err.code !== 'ECONNRESET' && socket.writable) {
    socket.end('HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n');
  } else {
    socket.destroy();
  }
});

process.on('SIGTERM', () => {
  server.close(() => {
    process.stderr.write('sessions stopped\n');
    process.exit(0);
  });
  // Idle keep-alive connections would hold close() open; end them.
  server.closeIdleConnections();
});

const port = parseInt(process.env.PORT || '8080', 10);
server.listen(port, '0.0.0.0', () => {
  process.stderr.write(`sessions listening on 0.0.0.0:${port} (state ${STATE_MB} MiB)\n`);
});
