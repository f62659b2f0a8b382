/**
 * `npm start` for real (`countersign start`): the authority, the demo upstream and the proxy in
 * one process on embedded defaults. The README walkthrough: evaluate → the request through the
 * proxy with the permit → the upstream answers → the audit log holds the whole chain; without a
 * permit, or with it a second time, the upstream is not reached; a held payment is approved by a
 * second identity made with `keys create` while start runs; the development configuration lets a
 * loop of 120 evaluations through, and every log line names its component once. `--upstream URL`
 * (or COUNTERSIGN_PROXY_UPSTREAM) puts the proxy in front of another application instead of the
 * demo upstream. The proxy's key is kept per database, as the bootstrap key is: switching between
 * the embedded database and Postgres needs no file deleted; a key its database revoked stops the
 * start with what to do. Without --config and --proxy-config, from any folder, it runs on the
 * configuration shipped with Countersign. Runs the compiled CLI (dist/), which `npm test` builds
 * first.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, readdir, readFile, stat, writeFile } from 'node:fs/promises';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import pg from 'pg';
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

/** The keys of a JSON object's top level as written, repeats included (JSON.parse keeps the last of each). */
function topLevelKeys(json: string): string[] {
  const keys: string[] = [];
  let depth = 0;
  let expectKey = false;
  for (let i = 0; i < json.length; i++) {
    const char = json[i];
    if (char === '"') {
      let end = i + 1;
      while (json[end] !== '"') end += json[end] === '\\' ? 2 : 1;
      if (depth === 1 && expectKey) keys.push(JSON.parse(json.slice(i, end + 1)) as string);
      expectKey = false;
      i = end;
    } else if (char === '{' || char === '[') {
      depth += 1;
      expectKey = char === '{' && depth === 1;
    } else if (char === '}' || char === ']') {
      depth -= 1;
    } else if (char === ',' && depth === 1) {
      expectKey = true;
    }
  }
  return keys;
}

// Several `countersign start` processes, each opening an embedded database and three servers: longer than .taprc's
// two minutes per file while the other test files keep a 2-core machine busy.
t.setTimeout(10 * 60_000);

t.test('npm start: evaluate, then the request through the proxy reaches the upstream exactly once', async (t) => {
  const dataDir = await mkdtemp(join(tmpdir(), 'countersign-start-'));
  const { child, ready, output } = await startCountersign(t, ['--upstream-listen', '127.0.0.1:0'], startEnv(dataDir));
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

  // The gate's records reach the audit log through the shared store (drained every second, so one
  // drain can take the execution record and the next the replay's refusal); the permit's proof
  // then shows its whole chain in order.
  const chain = ['evaluation.decided', 'permit.issued', 'permit.verified', 'execution.observed', 'permit.rejected'];
  const complete = (types: string[]) => chain.every((type) => types.includes(type));
  let types: string[] = [];
  for (let attempt = 0; attempt < 50 && !complete(types); attempt += 1) {
    const proof = await request(`${ready.authority}/v1/permits/${decision.json.permit_id as string}/proof`, { headers: { authorization: `Bearer ${apiKey}` } });
    types = ((await proof.body.json()) as { events: Array<{ type: string }> }).events.map((event) => event.type);
    if (!complete(types)) await new Promise((r) => setTimeout(r, 200));
  }
  t.same(types, chain, "the permit's proof holds the chain in order, and the replay");

  await t.test('the development configuration: a loop of 120 evaluations is not rate limited, and every log line names its component once', async (t) => {
    t.same(topLevelKeys('{"a":1,"name":"x","b":{"name":"y"},"name":"z","c":"\\"name\\""}'), ['a', 'name', 'b', 'name', 'c'], 'the key reader sees repeats and skips nested keys');
    const statuses = new Map<number, number>();
    let limit: unknown;
    const evaluate = async (call: number) => {
      const response = await request(`${ready.authority}/v1/evaluate`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${apiKey}` },
        body: JSON.stringify({ action_type: 'demo.echo', actor_id: 'demo-agent', context: { environment: 'dev', target: { type: 'demo', id: `order-${call}` } } }),
      });
      await response.body.dump();
      statuses.set(response.statusCode, (statuses.get(response.statusCode) ?? 0) + 1);
      limit ??= response.headers['x-ratelimit-limit'];
    };
    // Ten at a time: faster than one by one, and no gentler on the bucket (less time to refill).
    for (let call = 0; call < 120; call += 10) await Promise.all(Array.from({ length: 10 }, (_, i) => evaluate(call + i)));
    t.same(Object.fromEntries(statuses), { 200: 120 }, 'all 120 answered 200, none 429');
    t.equal(limit, '6000', "the evaluate limit of config/authority.yaml, not production's 100 a minute");

    const lines = output()
      .split('\n')
      .filter((line) => line.startsWith('{'));
    const names = lines.map((line) => topLevelKeys(line).filter((key) => key === 'name').length);
    t.same([...new Set(names)], [1], `each of the ${lines.length} log lines carries name once`);
    t.same([...new Set(lines.map((line) => (JSON.parse(line) as { name: string }).name))].sort(), ['authority', 'countersign', 'proxy'], 'the three components name their lines');
  });

  // The README's hold: a second identity, made with the CLI while start runs, approves it.
  const made = spawnSync(process.execPath, [CLI, 'keys', 'create', '--org', 'default', '--name', 'approver', '--scopes', 'approvals:write,hitl:approve'], {
    env: startEnv(dataDir),
    cwd: resolve('.'),
    encoding: 'utf8',
  });
  t.equal(made.status, 0, `keys create works while start runs: ${made.stderr}`);
  const approverKey = (JSON.parse(made.stdout) as { secret: string }).secret;
  const payment = (approvals?: string[]) => ({
    action_type: 'payments.wire',
    actor_id: 'finance-bot',
    context: { environment: 'production', amount_usd: 50_000, account_code: 'OPS-001', ...(approvals ? { approvals } : {}) },
  });
  const held = await post(`${ready.authority}/v1/evaluate`, payment(), { authorization: `Bearer ${apiKey}` });
  t.equal(held.json.decision, 'hold', 'a 50,000 USD wire is held');
  const approvalId = held.json.approval_request_id as string;
  const resolveAs = (key: string) => post(`${ready.authority}/v1/approvals/${approvalId}/resolve`, { decision: 'approve' }, { authorization: `Bearer ${key}` });
  t.equal((await resolveAs(apiKey)).status, 403, 'the identity that asked cannot approve it');
  const approved = await resolveAs(approverKey);
  t.equal(approved.status, 200, 'the second identity can');
  t.match(approved.json, { approval: { status: 'approved', bound_facts: { amount_usd: 50_000, account_code: 'OPS-001', environment: 'production' } } }, 'having seen what it approved');
  const paid = await post(`${ready.authority}/v1/evaluate`, payment([approvalId]), { authorization: `Bearer ${apiKey}` });
  t.match(paid.json, { decision: 'allow', human_approval_status: 'approved' }, 'the same action again, with the approval: allow');
  t.ok(paid.json.permit_token, 'with a permit');

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

/** The proxy key files in `dataDir`, by name. */
const proxyKeyFiles = async (dataDir: string) => (await readdir(dataDir)).filter((name) => /^proxy(-.+)?\.key$/.test(name)).sort();

/** Evaluates demo.echo for `id` with `apiKey` and sends it through the proxy: the proxy's status. */
async function throughTheProxy(ready: Record<string, string>, apiKey: string, id: string): Promise<number> {
  const decision = await post(`${ready.authority}/v1/evaluate`, { action_type: 'demo.echo', actor_id: 'demo-agent', context: { environment: 'dev', target: { type: 'demo', id } } }, { authorization: `Bearer ${apiKey}` });
  return (await post(`${ready.proxy}/echo/${id}`, {}, { 'x-service-permit': decision.json.permit_token as string, 'x-actor-id': 'demo-agent' })).status;
}

const stopped = async (child: ChildProcess) => {
  child.kill('SIGTERM');
  return (await once(child, 'exit'))[0] as number | null;
};

t.test('the proxy key is kept per database: one from another database is left for it, and this one gets its own', async (t) => {
  const dataDir = await mkdtemp(join(tmpdir(), 'countersign-start-'));
  // As after switching databases: a well-formed key that this database never issued.
  const foreign = `ask_test_${'A1'.repeat(20)}\n`;
  await writeFile(join(dataDir, 'proxy.key'), foreign, { mode: 0o600 });
  const first = await startCountersign(t, ['--upstream-listen', '127.0.0.1:0'], startEnv(dataDir));
  const files = await proxyKeyFiles(dataDir);
  t.equal(files.length, 2, 'a second key file');
  const own = files.find((name) => name !== 'proxy.key') as string;
  t.match(own, /^proxy-\d{8}T\d{6}Z\.key$/, 'named like the bootstrap key of a second database');
  t.equal((await stat(join(dataDir, own))).mode & 0o777, 0o600, 'mode 0600');
  t.match(await readFile(join(dataDir, own), 'utf8'), new RegExp(`^ask_test_\\w+\\n# the proxy's API key for embedded:${dataDir}`), 'the key, and the database it is for');
  t.equal(await readFile(join(dataDir, 'proxy.key'), 'utf8'), foreign, "the other database's key is left as it was");
  t.match(first.output(), `the proxy's API key for this database (embedded:${dataDir}) is in ${join(dataDir, own)}`, 'the log says which file is whose');
  const { api_key: apiKey } = JSON.parse(await readFile(join(dataDir, 'bootstrap.json'), 'utf8'));
  t.equal(await throughTheProxy(first.ready, apiKey, 'order-1'), 200, 'the proxy works with its own key');
  t.equal(await stopped(first.child), 0);

  const second = await startCountersign(t, ['--upstream-listen', '127.0.0.1:0'], startEnv(dataDir));
  t.same(await proxyKeyFiles(dataDir), files, 'on the next start this database finds its own key: no new one');
  t.equal(await throughTheProxy(second.ready, apiKey, 'order-2'), 200);

  // A key of this database that was revoked (here with the CLI, through the running server) stops the start.
  const keys = JSON.parse(spawnSync(process.execPath, [CLI, 'keys', 'list', '--org', 'default'], { env: startEnv(dataDir), encoding: 'utf8' }).stdout) as { api_keys: Array<{ id: string; name: string }> };
  const proxyKey = keys.api_keys.find((key) => key.name === 'proxy (countersign start)') as { id: string };
  t.equal(spawnSync(process.execPath, [CLI, 'keys', 'revoke', proxyKey.id, '--org', 'default'], { env: startEnv(dataDir), encoding: 'utf8' }).status, 0);
  t.equal(await stopped(second.child), 0);
  const refused = spawnSync(process.execPath, [CLI, 'start', '--config', 'config/authority.yaml', '--upstream-listen', '127.0.0.1:0'], {
    env: startEnv(dataDir),
    cwd: resolve('.'),
    encoding: 'utf8',
    timeout: 60_000,
  });
  t.equal(refused.status, 1, `a revoked key of this database stops the start: ${refused.stderr}`);
  t.match(refused.stderr, `countersign: the proxy's API key in ${join(dataDir, own)} does not authenticate here: it has been revoked`);
  t.match(refused.stderr, `Delete ${join(dataDir, own)} to have a new key issued`);
  t.notMatch(refused.stdout + refused.stderr, /"msg":"ready:/, 'nothing reported ready');
});

t.test('switching between the embedded database and Postgres needs no file deleted, either way', async (t) => {
  if (!process.env.DATABASE_URL) {
    t.comment('the Postgres variant did not run: DATABASE_URL is not set');
    return;
  }
  const admin = new pg.Client({ connectionString: process.env.DATABASE_URL });
  await admin.connect();
  const database = `start_${Math.random().toString(36).slice(2, 10)}`;
  await admin.query(`CREATE DATABASE ${database}`);
  t.teardown(async () => {
    await admin.query(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`);
    await admin.end();
  });
  const url = new URL(process.env.DATABASE_URL);
  url.pathname = `/${database}`;
  const postgresEnv = { DATABASE_URL: url.toString(), COUNTERSIGN_SECRET_KEY: Buffer.alloc(32, 9).toString('base64'), COUNTERSIGN_ALLOW_IN_PROCESS_STORE: '1' };
  const dataDir = await mkdtemp(join(tmpdir(), 'countersign-start-'));
  const keyOf = async (file: string) => (JSON.parse(await readFile(join(dataDir, file), 'utf8')) as { api_key: string }).api_key;

  const embedded = await startCountersign(t, ['--upstream-listen', '127.0.0.1:0'], startEnv(dataDir));
  t.equal(await throughTheProxy(embedded.ready, await keyOf('bootstrap.json'), 'e-1'), 200, 'on the embedded database');
  t.equal(await stopped(embedded.child), 0);
  t.same(await proxyKeyFiles(dataDir), ['proxy.key']);

  const onPostgres = await startCountersign(t, ['--upstream-listen', '127.0.0.1:0'], startEnv(dataDir, postgresEnv));
  const postgresBootstrap = (await readdir(dataDir)).find((name) => /^bootstrap-.+\.json$/.test(name)) as string;
  t.ok(postgresBootstrap, "Postgres's admin key goes beside the embedded one's");
  t.equal(await throughTheProxy(onPostgres.ready, await keyOf(postgresBootstrap), 'p-1'), 200, 'then on Postgres, with no file deleted');
  t.equal(await stopped(onPostgres.child), 0);
  const both = await proxyKeyFiles(dataDir);
  t.equal(both.length, 2, "and Postgres's proxy key beside the embedded one's");

  const back = await startCountersign(t, ['--upstream-listen', '127.0.0.1:0'], startEnv(dataDir));
  t.equal(await throughTheProxy(back.ready, await keyOf('bootstrap.json'), 'e-2'), 200, 'and back on the embedded database, with its own key again');
  t.same(await proxyKeyFiles(dataDir), both, 'no new key file');
  t.equal(await stopped(back.child), 0);
});
