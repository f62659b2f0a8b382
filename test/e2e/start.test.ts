/**
 * `npm start` for real (`countersign start`): the authority, the demo upstream and the proxy in
 * one process on embedded defaults. The README walkthrough: evaluate → the request through the
 * proxy with the permit → the upstream answers → the audit log holds the whole chain; without a
 * permit, or with it a second time, the upstream is not reached. `--upstream URL` (or
 * COUNTERSIGN_PROXY_UPSTREAM) puts the proxy in front of another application instead of the demo
 * upstream; a stale proxy.key stops the start with what to do. Without --config and
 * --proxy-config, from any folder, it runs on the configuration shipped with Countersign. Runs
 * the compiled CLI (dist/), which `npm test` builds first.
 */
import { spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, readFile, stat, unlink, writeFile } from 'node:fs/promises';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import t, { type Test } from 'tap';
import { request } from 'undici';

const CLI = resolve('dist/bin/countersign.js');

/** The environment of a `countersign start` on loopback ports the OS picks, in its own data directory. */
const startEnv = (dataDir: string, extra: Record<string, string> = {}) => ({
  PATH: process.env.PATH,
  COUNTERSIGN_DATA_DIR: dataDir,
  COUNTERSIGN_AUTHORITY_LISTEN: '127.0.0.1:0',
  COUNTERSIGN_AUTHORITY_ADMIN_LISTEN: '127.0.0.1:0',
  COUNTERSIGN_PROXY_LISTEN: '127.0.0.1:0',
  COUNTERSIGN_PROXY_ADMIN_LISTEN: '127.0.0.1:0',
  ...extra,
});

/**
 * Spawns `countersign start …` and waits for its ready line (rejects with the output if it exits
 * first). As `npm start` runs it, in the clone with --config config/authority.yaml; given `from`,
 * in that folder with no configuration named.
 */
async function startCountersign(t: Test, args: string[], env: NodeJS.ProcessEnv, from?: string) {
  const command = from === undefined ? [CLI, 'start', '--config', 'config/authority.yaml', ...args] : [CLI, 'start', ...args];
  const child = spawn(process.execPath, command, { env, cwd: from ?? resolve('.') });
  t.teardown(() => child.kill('SIGKILL'));
  let output = '';
  child.stdout.on('data', (chunk) => (output += String(chunk)));
  child.stderr.on('data', (chunk) => (output += String(chunk)));
  const ready = await new Promise<Record<string, unknown>>((resolveReady, reject) => {
    child.stdout.on('data', () => {
      const line = output.split('\n').find((candidate) => candidate.includes('"msg":"ready:'));
      if (line) resolveReady(JSON.parse(line));
    });
    child.once('exit', (code) => reject(new Error(`countersign start exited with ${code}:\n${output}`)));
  });
  return { child, ready: ready as Record<string, string> & { demo_upstream: boolean; msg: string }, output: () => output };
}

const post = async (url: string, body: unknown, headers: Record<string, string> = {}) => {
  const response = await request(url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
  return { status: response.statusCode, json: (await response.body.json()) as Record<string, unknown> };
};

// Several `countersign start` processes, each opening an embedded database and three servers: longer than .taprc's
// two minutes per file while the other test files keep a 2-core machine busy.
t.setTimeout(6 * 60_000);

t.test('npm start: evaluate, then the request through the proxy reaches the upstream exactly once', async (t) => {
  const dataDir = await mkdtemp(join(tmpdir(), 'countersign-start-'));
  const { child, ready } = await startCountersign(t, ['--upstream-listen', '127.0.0.1:0'], startEnv(dataDir));
  t.equal(ready.demo_upstream, true, 'without --upstream the demo upstream runs');

  const { api_key: apiKey } = JSON.parse(await readFile(join(dataDir, 'bootstrap.json'), 'utf8'));
  const evaluate = () =>
    post(`${ready.authority}/v1/evaluate`, { action_type: 'demo.echo', actor_id: 'demo-agent', context: { environment: 'dev', target: { type: 'demo', id: 'order-42' } } }, { authorization: `Bearer ${apiKey}` });

  const decision = await evaluate();
  t.equal(decision.json.decision, 'allow');
  const permit = decision.json.permit_token as string;

  const through = await post(`${ready.proxy}/echo/order-42`, { hello: 'world' }, { 'x-service-permit': permit, 'x-actor-id': 'demo-agent' });
  t.equal(through.status, 200, 'the permitted request reached the upstream');
  t.same(through.json, { echoed: 'order-42', body: '{"hello":"world"}', permit_id: decision.json.permit_id, mode: 'enforce' });

  const replay = await post(`${ready.proxy}/echo/order-42`, {}, { 'x-service-permit': permit, 'x-actor-id': 'demo-agent' });
  t.equal(replay.status, 403);
  t.match(replay.json, { error: 'permit_rejected', reason: 'PERMIT_ALREADY_USED' });
  const none = await post(`${ready.proxy}/echo/order-42`, {}, { 'x-actor-id': 'demo-agent' });
  t.equal(none.status, 403);
  t.match(none.json, { error: 'permit_required' });
  const other = await post(`${ready.proxy}/echo/order-43`, {}, { 'x-service-permit': (await evaluate()).json.permit_token as string, 'x-actor-id': 'demo-agent' });
  t.match(other.json, { error: 'permit_rejected', reason: 'BINDING_MISMATCH' }, 'a permit for order-42 does not open order-43');

  t.equal((await stat(join(dataDir, 'proxy.key'))).mode & 0o777, 0o600, "the proxy's own key is written with mode 0600");

  // The gate's records reach the audit log through the shared store (drained every second); the
  // permit's proof then shows its whole chain in order.
  let types: string[] = [];
  for (let attempt = 0; attempt < 50 && !types.includes('execution.observed'); attempt += 1) {
    const proof = await request(`${ready.authority}/v1/permits/${decision.json.permit_id as string}/proof`, { headers: { authorization: `Bearer ${apiKey}` } });
    types = ((await proof.body.json()) as { events: Array<{ type: string }> }).events.map((event) => event.type);
    if (!types.includes('execution.observed')) await new Promise((r) => setTimeout(r, 200));
  }
  t.same(types, ['evaluation.decided', 'permit.issued', 'permit.verified', 'execution.observed', 'permit.rejected'], "the permit's proof holds the chain in order, and the replay");

  child.kill('SIGTERM');
  const [code] = await once(child, 'exit');
  t.equal(code, 0, 'SIGTERM stops all three and exits 0');
});

/** The user's own application: records every request that reaches it. */
async function userUpstream(t: Test) {
  const seen: Array<{ method: string; url: string; body: string; permitHeader: unknown }> = [];
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (chunk) => (body += String(chunk)));
    req.on('end', () => {
      seen.push({ method: req.method ?? '', url: req.url ?? '', body, permitHeader: req.headers['x-service-permit'] });
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ served_by: 'user-upstream' }));
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  t.teardown(() => new Promise<void>((done) => server.close(() => done())));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, seen };
}

t.test('start --upstream URL from an empty folder: the shipped configuration, and a permitted request reaches your application once', async (t) => {
  const upstream = await userUpstream(t);
  const dataDir = await mkdtemp(join(tmpdir(), 'countersign-start-'));
  const emptyFolder = await mkdtemp(join(tmpdir(), 'countersign-start-cwd-'));
  const { child, ready } = await startCountersign(t, ['--upstream', upstream.url], startEnv(dataDir), emptyFolder);
  t.equal(ready.upstream, upstream.url, 'the proxy forwards to the given URL');
  t.equal(ready.demo_upstream, false, 'no demo upstream is started');
  t.match(ready.msg, `in front of your upstream at ${upstream.url}`, 'the ready line says which upstream');
  const session = await request(`${ready.authority}/console/api/session`);
  t.match(await session.body.json(), { sign_in: { api_key: true } }, "the development configuration shipped in config/authority.yaml: the console's API-key sign-in is on");

  const { api_key: apiKey } = JSON.parse(await readFile(join(dataDir, 'bootstrap.json'), 'utf8'));
  const action = { action_type: 'demo.echo', actor_id: 'demo-agent', context: { environment: 'dev', target: { type: 'demo', id: 'order-7' } } };
  const decision = await post(`${ready.authority}/v1/evaluate`, action, { authorization: `Bearer ${apiKey}` });
  t.equal(decision.json.decision, 'allow');
  const headers = { 'x-service-permit': decision.json.permit_token as string, 'x-actor-id': 'demo-agent' };

  const through = await post(`${ready.proxy}/echo/order-7`, { amount: 1 }, headers);
  t.equal(through.status, 200);
  t.same(through.json, { served_by: 'user-upstream' }, "the answer is your application's");
  const replay = await post(`${ready.proxy}/echo/order-7`, { amount: 1 }, headers);
  t.match(replay.json, { error: 'permit_rejected', reason: 'PERMIT_ALREADY_USED' });
  t.same(
    upstream.seen.map(({ method, url, body, permitHeader }) => ({ method, url, body, permitHeader })),
    [{ method: 'POST', url: '/echo/order-7', body: '{"amount":1}', permitHeader: undefined }],
    'your application saw the permitted request exactly once, without the permit header',
  );

  child.kill('SIGTERM');
  t.equal((await once(child, 'exit'))[0], 0);
});

t.test('COUNTERSIGN_PROXY_UPSTREAM has the same effect as --upstream', async (t) => {
  const upstream = await userUpstream(t);
  const dataDir = await mkdtemp(join(tmpdir(), 'countersign-start-'));
  const { child, ready } = await startCountersign(t, [], startEnv(dataDir, { COUNTERSIGN_PROXY_UPSTREAM: upstream.url }));
  t.equal(ready.upstream, upstream.url);
  t.equal(ready.demo_upstream, false);
  child.kill('SIGTERM');
  t.equal((await once(child, 'exit'))[0], 0);
});

t.test('a proxy.key the database does not know stops start with what to do, instead of a proxy that never gets ready', async (t) => {
  const dataDir = await mkdtemp(join(tmpdir(), 'countersign-start-'));
  // As after switching to another database: a well-formed key that this database never issued.
  const keyFile = join(dataDir, 'proxy.key');
  await writeFile(keyFile, `ask_test_${'A1'.repeat(20)}\n`, { mode: 0o600 });
  const result = spawnSync(process.execPath, [CLI, 'start', '--config', 'config/authority.yaml', '--upstream-listen', '127.0.0.1:0'], {
    env: startEnv(dataDir),
    cwd: resolve('.'),
    encoding: 'utf8',
    timeout: 60_000,
  });
  t.equal(result.status, 1, `exits 1 by itself: ${result.stderr}`);
  t.match(result.stderr, `countersign: the proxy's API key in ${keyFile} does not authenticate here`);
  t.match(result.stderr, /another database/);
  t.match(result.stderr, `Delete ${keyFile} to have a new key issued`);
  t.match(result.stderr, /set DATABASE_URL back/);
  t.notMatch(result.stdout + result.stderr, /"msg":"ready:/, 'nothing reported ready');

  await unlink(keyFile);
  const { child } = await startCountersign(t, ['--upstream-listen', '127.0.0.1:0'], startEnv(dataDir));
  t.match(await readFile(keyFile, 'utf8'), /^ask_test_/, 'with the file deleted, a new key is issued and start succeeds');
  child.kill('SIGTERM');
  t.equal((await once(child, 'exit'))[0], 0);
});
