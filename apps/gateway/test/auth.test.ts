import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { generateKeyPairSync } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SignJWT } from 'jose';
import WebSocket from 'ws';
import { Client, eventually, type Gateway, metricValue, rawUpgrade, runUntilExit, startGateway, TEST_ADMIN_TOKEN } from './harness.ts';

const SECRET = 'test-secret-of-at-least-thirty-two-characters';
const enc = new TextEncoder();
const dir = mkdtempSync(join(tmpdir(), 'sluice-auth-'));
after(() => rmSync(dir, { recursive: true, force: true }));

interface Claims {
  sub?: string;
  tenant?: unknown;
  topics?: unknown;
  publish?: unknown;
  iss?: string;
  aud?: string;
}

/** A token signed with `key` (the HS256 secret by default) that expires `ttlS` seconds from now. */
async function token(claims: Claims, opts: { ttlS?: number; exp?: number; secret?: string; alg?: string; key?: CryptoKeyLike } = {}):
  Promise<string> {
  const { iss, aud, ...rest } = claims;
  let jwt = new SignJWT({ sub: 'u1', ...rest }).setProtectedHeader({ alg: opts.alg ?? 'HS256' }).setIssuedAt()
    .setExpirationTime(opts.exp ?? Math.floor(Date.now() / 1000) + (opts.ttlS ?? 600));
  if (iss !== undefined) jwt = jwt.setIssuer(iss);
  if (aud !== undefined) jwt = jwt.setAudience(aud);
  return jwt.sign(opts.key ?? enc.encode(opts.secret ?? SECRET));
}
type CryptoKeyLike = Parameters<SignJWT['sign']>[0];

const bearer = (t: string) => ({ authorization: `Bearer ${t}` });

async function refusal(gw: Gateway, headers: Record<string, string | null>, path?: string): Promise<{ status: number; reason: string }> {
  const r = await rawUpgrade(gw.port, { headers, ...(path === undefined ? {} : { path }) });
  return { status: r.status, reason: (JSON.parse(r.body) as { reason: string }).reason };
}

describe('WS_AUTH=jwt with HS256', () => {
  let gw: Gateway;
  before(async () => {
    gw = await startGateway({ WS_AUTH: 'jwt', WS_JWT_SECRET: SECRET, WS_JWT_ISSUER: 'https://id.example', WS_JWT_AUDIENCE: 'sluice',
      LOG_LEVEL: 'debug' });
  });
  after(async () => {
    assert.equal(await gw.stop(), 0);
  });
  const good = (claims: Claims = {}, opts = {}) => token({ iss: 'https://id.example', aud: 'sluice', ...claims }, opts);

  test('refusals at the upgrade: 401 missing, bad signature, wrong issuer or audience, expired, malformed claims', async () => {
    const cases: [string, Record<string, string | null>, string?][] = [
      ['missing', {}],
      ['not a bearer header', { authorization: `Basic ${Buffer.from('a:b').toString('base64')}` }],
      ['garbage', bearer('not.a.jwt')],
      ['bad signature', bearer(await good({}, { secret: 'another-secret-of-at-least-thirty-two-chars' }))],
      ['wrong issuer', bearer(await token({ iss: 'https://evil.example', aud: 'sluice' }))],
      ['no issuer', bearer(await token({ aud: 'sluice' }))],
      ['wrong audience', bearer(await token({ iss: 'https://id.example', aud: 'other' }))],
      ['expired', bearer(await good({}, { exp: Math.floor(Date.now() / 1000) - 5 }))],
      ['tenant with a slash', bearer(await good({ tenant: 'a/b' }))],
      ['topics not a list', bearer(await good({ topics: 'room:*' }))],
      ['no sub', bearer(await good({ sub: '' }))],
      ['bad token in the query', {}, '/ws?token=abc'],
      ['alg none', bearer(`${Buffer.from('{"alg":"none"}').toString('base64url')}.${Buffer.from('{"sub":"u","exp":9999999999}')
        .toString('base64url')}.`)],
    ];
    for (const [what, headers, path] of cases) {
      assert.deepEqual(await refusal(gw, headers, path), { status: 401, reason: 'unauthorized' }, what);
    }
    assert.equal(await metricValue(gw, 'sluice_upgrades_total', '{outcome="unauthorized"}'), cases.length);
    // Refusals are logged at debug, with why, and never with the token.
    const logged = gw.logs.filter((l) => l.msg === 'upgrade refused');
    assert.ok(logged.some((l) => l.why === 'bad signature'), JSON.stringify(logged.map((l) => l.why)));
    assert.ok(logged.some((l) => l.why === 'token expired'));
    assert.ok(logged.every((l) => l.level === 'debug'));
    assert.ok(!JSON.stringify(gw.logs).includes((cases[3]![1].authorization!).slice(7)), 'a token never reaches the log');
  });

  test('the token is taken from the header, the query or the bearer. subprotocol; sluice.v1 is answered', async () => {
    const t = await good({ topics: ['*'] });
    const viaHeader = await Client.connect(gw.url(), { headers: bearer(t) });
    const viaQuery = await Client.connect(gw.url(`/ws?token=${encodeURIComponent(t)}`));
    const viaProtocol = await Client.connect(gw.url(), { protocols: ['sluice.v1', `bearer.${t}`] });
    assert.equal(viaProtocol.ws.protocol, 'sluice.v1', 'the bearer token is never echoed as the protocol');
    for (const c of [viaHeader, viaQuery, viaProtocol]) {
      assert.equal(c.welcome.type, 'welcome');
      assert.equal((await c.request({ type: 'join', topic: 'room:1' })).status, 'ok');
      c.close();
    }
  });

  test('join outside `topics` and publish outside `publish` answer forbidden; the socket stays usable', async () => {
    const c = await Client.connect(gw.url(), { headers: bearer(await good({ topics: ['room:*', 'news'], publish: ['room:1'] })) });
    const forbidden = async (frame: Record<string, unknown>) => {
      const r = await c.request(frame);
      assert.equal(r.status, 'error', JSON.stringify(frame));
      assert.equal(r.reason, 'forbidden', JSON.stringify(frame));
    };
    await forbidden({ type: 'join', topic: 'admin' });
    await forbidden({ type: 'join', topic: 'newsroom' });
    await forbidden({ type: 'publish', topic: 'room:2', data: 1 });
    await forbidden({ type: 'publish', topic: 'news', data: 1 });
    assert.equal((await c.request({ type: 'join', topic: 'room:2' })).status, 'ok');
    assert.equal((await c.request({ type: 'join', topic: 'news' })).status, 'ok');
    assert.equal((await c.request({ type: 'join', topic: 'room:1' })).status, 'ok');
    const ack = await c.request({ type: 'publish', topic: 'room:1', data: 'hi' });
    assert.equal(ack.status, 'ok');
    assert.equal((await c.next((f) => f.type === 'event')).data, 'hi');
    // Defaults: a token without `topics` or `publish` may do neither.
    const bare = await Client.connect(gw.url(), { headers: bearer(await good()) });
    assert.equal((await bare.request({ type: 'join', topic: 'room:1' })).reason, 'forbidden');
    assert.equal((await bare.request({ type: 'publish', topic: 'room:1', data: 1 })).reason, 'forbidden');
    assert.ok((await metricValue(gw, 'sluice_limit_rejections_total', '{reason="forbidden"}')) >= 6);
    c.close();
    bare.close();
  });

  test('two tenants, same topic name: events, history and admin publishes never cross', async () => {
    const rights = { topics: ['room:*'], publish: ['room:*'] };
    const a1 = await Client.connect(gw.url(), { headers: bearer(await good({ ...rights, tenant: 'acme', sub: 'a1' })) });
    const a2 = await Client.connect(gw.url(), { headers: bearer(await good({ ...rights, tenant: 'acme', sub: 'a2' })) });
    const b1 = await Client.connect(gw.url(), { headers: bearer(await good({ ...rights, tenant: 'globex', sub: 'b1' })) });
    for (const c of [a1, a2, b1]) assert.equal((await c.request({ type: 'join', topic: 'room:x' })).status, 'ok');
    const fromA = await a1.request({ type: 'publish', topic: 'room:x', data: 'acme-1' });
    const fromB = await b1.request({ type: 'publish', topic: 'room:x', data: 'globex-1' });
    const admin = await gw.adminPost('/v1/publish', '{"tenant":"acme","topic":"room:x","data":"acme-admin"}');
    assert.equal(admin.status, 200);
    await a2.next((f) => f.type === 'event' && f.data === 'acme-admin');
    await b1.next((f) => f.type === 'event' && f.data === 'globex-1');
    // A probe published after everything else: once b1 has it, nothing of acme's can still be on its way.
    await b1.request({ type: 'publish', topic: 'room:x', data: 'probe' });
    await b1.next((f) => f.type === 'event' && f.data === 'probe');
    assert.deepEqual(a2.takeEvents('room:x').map((e) => e.data), ['acme-1'], 'acme sees only acme');
    assert.deepEqual(b1.takeEvents('room:x').map((e) => e.data), [], 'globex sees nothing of acme');
    // History is per tenant too: a globex resume from before acme's event replays only globex events.
    const b2 = await Client.connect(gw.url(), { headers: bearer(await good({ ...rights, tenant: 'globex', sub: 'b2' })) });
    const since = `${Number(String((fromA.data as { id: string }).id).split('-')[0]) - 1}-0`;
    const r = await b2.request({ type: 'join', topic: 'room:x', since });
    assert.equal(r.status, 'ok');
    assert.deepEqual(b2.takeEvents('room:x').map((e) => e.data), ['globex-1', 'probe']);
    assert.equal(fromB.status, 'ok');
    for (const c of [a1, a2, b1, b2]) c.close();
  });

  test('a token that expires while its socket is open closes it with 4001 token_expired within 1 s of exp', async () => {
    const exp = Math.floor(Date.now() / 1000) + 3;
    const c = await Client.connect(gw.url(), { headers: bearer(await good({ topics: ['*'] }, { exp })) });
    const other = await Client.connect(gw.url(), { headers: bearer(await good({ topics: ['*'] }, { ttlS: 600 })) });
    assert.equal((await c.request({ type: 'join', topic: 'room:e' })).status, 'ok');
    const closed = await c.closedBy(6000);
    const at = Date.now();
    assert.equal(closed.code, 4001);
    assert.deepEqual(JSON.parse(closed.reason), { reason: 'token_expired' });
    assert.ok(at >= exp * 1000 - 20, `closed ${exp * 1000 - at} ms before exp`);
    assert.ok(at <= exp * 1000 + 1000, `closed ${at - exp * 1000} ms after exp`);
    assert.equal((await other.request({ type: 'ping' })).type, 'pong', 'a socket with a later exp stays open');
    other.close();
  });
});

describe('WS_AUTH=jwt with a public key file', () => {
  for (const [alg, pair] of [
    ['RS256', generateKeyPairSync('rsa', { modulusLength: 2048 })],
    ['ES256', generateKeyPairSync('ec', { namedCurve: 'prime256v1' })],
  ] as const) {
    test(`${alg}: a token signed with the private key is accepted; HS256 with the public key as secret is not`, async () => {
      const file = join(dir, `${alg}.pem`);
      const pem = pair.publicKey.export({ type: 'spki', format: 'pem' }).toString();
      writeFileSync(file, pem);
      const gw = await startGateway({ WS_AUTH: 'jwt', WS_JWT_PUBLIC_KEY_FILE: file, WS_WORKERS: '1' });
      const t = await token({ topics: ['*'] }, { alg, key: pair.privateKey });
      const c = await Client.connect(gw.url(), { headers: bearer(t) });
      assert.equal((await c.request({ type: 'join', topic: 'k' })).status, 'ok');
      c.close();
      // Algorithm confusion: the public key used as an HMAC secret.
      const confused = await token({ topics: ['*'] }, { alg: 'HS256', secret: pem });
      assert.deepEqual(await refusal(gw, bearer(confused)), { status: 401, reason: 'unauthorized' });
      assert.equal(await gw.stop(), 0);
    });
  }

  test('a missing or unusable key file stops the start with a message naming WS_JWT_PUBLIC_KEY_FILE', async () => {
    const garbage = join(dir, 'garbage.pem');
    writeFileSync(garbage, 'not a key');
    const ed = join(dir, 'ed25519.pem');
    writeFileSync(ed, generateKeyPairSync('ed25519').publicKey.export({ type: 'spki', format: 'pem' }));
    for (const [file, accepts] of [[join(dir, 'nope.pem'), /cannot read it \(ENOENT\)/], [garbage, /expected a PEM public key/],
      [ed, /expected an RSA \(RS256\) or EC P-256 \(ES256\) public key, got ed25519/]] as const) {
      const r = await runUntilExit({ WS_AUTH: 'jwt', WS_JWT_PUBLIC_KEY_FILE: file, ADMIN_TOKEN: 'admin-token' });
      assert.equal(r.code, 2, r.stderr);
      assert.match(r.stderr, /WS_JWT_PUBLIC_KEY_FILE=/);
      assert.match(r.stderr, accepts);
    }
    const none = await runUntilExit({ WS_AUTH: 'jwt' });
    assert.equal(none.code, 2);
    assert.match(none.stderr, /WS_JWT_SECRET="": expected a key for WS_AUTH=jwt/);
  });
});

describe('the admin API is safe by default', () => {
  test('WS_AUTH=jwt without ADMIN_TOKEN stops the start, naming ADMIN_TOKEN and ADMIN_INSECURE', async () => {
    const r = await runUntilExit({ WS_AUTH: 'jwt', WS_JWT_SECRET: SECRET });
    assert.equal(r.code, 2, r.stderr);
    assert.match(r.stderr, /Invalid configuration \(1 problem\)/);
    assert.match(r.stderr, /ADMIN_TOKEN="": expected a token for the admin API with WS_AUTH=jwt \(or ADMIN_INSECURE=1/);
  });

  test('with ADMIN_INSECURE=1 it starts, says so, and its admin API is open', async () => {
    const gw = await startGateway({ WS_AUTH: 'jwt', WS_JWT_SECRET: SECRET, ADMIN_TOKEN: '', ADMIN_INSECURE: '1', WS_WORKERS: '1' });
    assert.ok(gw.logs.some((l) => l.level === 'warn' && String(l.msg).startsWith('ADMIN_TOKEN is unset')),
      'the start warns that the admin API is open');
    const res = await fetch(gw.admin('/v1/publish'), { method: 'POST', body: '{"topic":"t","data":1}' });
    assert.equal(res.status, 200);
    await gw.stop();
  });

  test('with ADMIN_TOKEN every route but health and metrics needs it; errors are {reason, message}', async () => {
    const gw = await startGateway({ WS_AUTH: 'jwt', WS_JWT_SECRET: SECRET, WS_WORKERS: '1' });
    for (const path of ['/health/live', '/health/ready', '/metrics']) assert.equal((await fetch(gw.admin(path))).status, 200, path);
    for (const path of ['/v1/publish', '/v1/revoke', '/v1/disconnect', '/v1/subscribe', '/v1/unsubscribe', '/admin/drain']) {
      for (const authorization of [undefined, 'Bearer wrong', `Bearer ${TEST_ADMIN_TOKEN}x`, TEST_ADMIN_TOKEN]) {
        const res = await fetch(gw.admin(path), { method: 'POST', body: '{}', headers: authorization === undefined ? {} : { authorization } });
        assert.equal(res.status, 401, `${path} with ${authorization}`);
        const body = (await res.json()) as Record<string, unknown>;
        assert.equal(body.reason, 'unauthorized');
        assert.equal(typeof body.message, 'string');
      }
    }
    assert.ok(gw.alive, 'a drain was not started by a caller without the token');
    await gw.stop();
  });
});

describe('upgrade hygiene', () => {
  let gw: Gateway;
  before(async () => {
    gw = await startGateway({ WS_ALLOWED_ORIGINS: 'https://app.example.com,https://*.example.org', WS_MAX_HEADER_BYTES: '2048',
      WS_TRUST_PROXY: '1', WS_HARD_MAX_FRAME_BYTES: '4096', WS_MAX_FRAME_BYTES: '1024' });
  });
  after(async () => {
    assert.equal(await gw.stop(), 0);
  });

  test('WS_ALLOWED_ORIGINS: other origins get 403 forbidden_origin; listed ones and non-browsers get in', async () => {
    for (const origin of ['https://evil.example', 'https://app.example.com.evil.example', 'http://app.example.com', 'null']) {
      assert.deepEqual(await refusal(gw, { origin }), { status: 403, reason: 'forbidden_origin' }, origin);
    }
    for (const origin of ['https://app.example.com', 'https://eu.example.org', undefined]) {
      const c = await Client.connect(gw.url(), { headers: origin === undefined ? {} : { origin } });
      assert.equal(c.welcome.type, 'welcome', String(origin));
      c.close();
    }
    assert.equal(await metricValue(gw, 'sluice_upgrades_total', '{outcome="forbidden_origin"}'), 4);
  });

  test('a handshake with oversized headers gets 431; a wrong version 426; a malformed key 400', async () => {
    assert.deepEqual(await refusal(gw, { 'x-junk': 'j'.repeat(2100) }), { status: 431, reason: 'headers_too_large' });
    assert.deepEqual(await refusal(gw, {}, `/ws?${'q'.repeat(2100)}`), { status: 431, reason: 'headers_too_large' });
    const v = await rawUpgrade(gw.port, { headers: { 'sec-websocket-version': '8' } });
    assert.equal(v.status, 426);
    assert.equal(v.headers['sec-websocket-version'], '13');
    assert.deepEqual(await refusal(gw, { 'sec-websocket-key': 'short' }), { status: 400, reason: 'bad_request' });
    assert.deepEqual(await refusal(gw, { 'sec-websocket-key': null }), { status: 400, reason: 'bad_request' });
    // Just under the cap is fine.
    const c = await Client.connect(gw.url(), { headers: { 'x-junk': 'j'.repeat(1500) } });
    c.close();
  });

  test('the client address is fixed at the upgrade: X-Forwarded-For only as far as WS_TRUST_PROXY reaches', async () => {
    // The right-most entry is what the trusted proxy saw; the left one was written by the client.
    const ws = new WebSocket(gw.url(), ['sluice.v1'], { headers: { 'x-forwarded-for': '6.6.6.6, 203.0.113.7' } });
    await new Promise((r) => ws.once('message', r));
    ws.send(`{"type":"publish","data":"${'x'.repeat(5000)}"}`); // above the hard cap: the close is logged with the address
    await new Promise((r) => ws.once('close', r));
    await eventually(() => gw.logs.some((l) => l.msg === 'closing socket: frame above the hard cap'));
    const line = gw.logs.find((l) => l.msg === 'closing socket: frame above the hard cap')!;
    assert.equal(line.ip, '203.0.113.7');
  });
});

describe('WS_AUTH=none', () => {
  test('logs a warning at start, and everyone is anonymous of tenant default with every right', async () => {
    const gw = await startGateway({ WS_WORKERS: '1' });
    assert.ok(gw.logs.some((l) => l.level === 'warn' && String(l.msg).startsWith('WS_AUTH=none')));
    const c = await Client.connect(gw.url());
    assert.equal((await c.request({ type: 'join', topic: 'any' })).status, 'ok');
    assert.equal((await c.request({ type: 'publish', topic: 'any', data: 1 })).status, 'ok');
    const admin = await gw.adminPost('/v1/publish', '{"topic":"any","data":2}');
    assert.equal(admin.status, 200, 'no tenant in the body is tenant default');
    await c.next((f) => f.type === 'event' && f.data === 1);
    await c.next((f) => f.type === 'event' && f.data === 2);
    c.close();
    assert.equal(await gw.stop(), 0);
  });
});
