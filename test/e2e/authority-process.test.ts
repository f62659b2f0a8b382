/**
 * The README's start command, for real: `countersign authority` as a child process on loopback,
 * first on its embedded defaults (PGlite + in-process store), then on Postgres + Redis. It
 * bootstraps once, answers with the bootstrap key, serves /metrics on the admin port, keeps its
 * data across a restart, and drains and exits 0 on SIGTERM.
 *
 * It runs the compiled CLI (dist/), which `npm test` builds first.
 */
import { spawn, spawnSync, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { once } from 'node:events';
import pg from 'pg';
import t from 'tap';
import { request } from 'undici';
import { CountersignApiError, CountersignClient } from '../../shared/client/client.js';

const CLI = resolve('dist/bin/countersign.js');

interface Started {
  child: ChildProcessWithoutNullStreams;
  output: () => string;
  api: string;
  admin: string;
  ready: Record<string, unknown>;
}

async function startAuthority(env: NodeJS.ProcessEnv): Promise<Started> {
  const child = spawn(process.execPath, [CLI, 'authority'], {
    env: { PATH: process.env.PATH, COUNTERSIGN_AUTHORITY_LISTEN: '127.0.0.1:0', COUNTERSIGN_AUTHORITY_ADMIN_LISTEN: '127.0.0.1:0', ...env },
  });
  let output = '';
  child.stdout.on('data', (chunk) => (output += String(chunk)));
  child.stderr.on('data', (chunk) => (output += String(chunk)));
  const ready = await new Promise<Record<string, unknown>>((resolveReady, reject) => {
    const look = () => {
      for (const line of output.split('\n')) {
        if (line.includes('"authority ready"')) return resolveReady(JSON.parse(line));
      }
    };
    child.stdout.on('data', look);
    child.once('exit', (code) => reject(new Error(`authority exited with ${code} before it was ready:\n${output}`)));
  });
  return { child, output: () => output, api: ready.api as string, admin: ready.admin as string, ready };
}

async function stop(started: Started): Promise<number | null> {
  started.child.kill('SIGTERM');
  const [code] = await once(started.child, 'exit');
  return code as number | null;
}

const call = async (url: string, headers: Record<string, string> = {}) => {
  const response = await request(url, { headers });
  return { status: response.statusCode, headers: response.headers, text: await response.body.text() };
};

// Several authority processes started, restarted and stopped, each opening its database: longer
// than .taprc's two minutes per file while the other test files keep a 2-core machine busy.
t.setTimeout(6 * 60_000);

t.before(() => {
  if (!existsSync(CLI)) throw new Error('dist/bin/countersign.js is missing: run `npm run build` (npm test does it first)');
});

t.test('npm start on embedded defaults: bootstrap, authenticated API, metrics, restart, SIGTERM', async (t) => {
  const dataDir = await mkdtemp(join(tmpdir(), 'countersign-e2e-'));
  const first = await startAuthority({ COUNTERSIGN_DATA_DIR: dataDir });
  t.teardown(() => first.child.kill('SIGKILL'));
  t.match(first.ready, { database: 'pglite', store: 'memory' });

  const bootstrapFile = join(dataDir, 'bootstrap.json');
  t.equal((await stat(bootstrapFile)).mode & 0o777, 0o600);
  const { api_key: key, organization_id: orgId } = JSON.parse(await readFile(bootstrapFile, 'utf8'));
  t.ok(first.output().includes(bootstrapFile), 'the log says where the key is');
  t.notOk(first.output().includes(key), 'the log never holds the key');

  const self = await call(`${first.api}/v1-api-key-self`, { authorization: `Bearer ${key}` });
  t.equal(self.status, 200);
  t.equal(JSON.parse(self.text).organization_id, orgId);
  t.equal((await call(`${first.api}/v1/api-keys`)).status, 401, 'no credential, no access');
  t.equal((await call(`${first.api}/healthz`)).status, 200);
  t.equal((await call(`${first.api}/readyz`)).status, 200);

  const metrics = await call(`${first.admin}/metrics`);
  t.equal(metrics.status, 200);
  t.match(metrics.text, /countersign_http_requests_total\{method="GET",route="\/v1-api-key-self",status_code="200"\} 1/, 'HTTP metrics by route template');
  t.match(metrics.text, /process_cpu_user_seconds_total/, 'default process metrics');
  t.equal((await call(`${first.api}/metrics`)).status, 404, '/metrics is not on the API port');

  const whileRunning = spawnSync(process.execPath, [CLI, 'keys', 'list', '--org', 'default'], { env: { PATH: process.env.PATH, COUNTERSIGN_DATA_DIR: dataDir }, encoding: 'utf8' });
  t.equal(whileRunning.status, 0, `while the server holds the data directory, it runs the CLI's command: ${whileRunning.stderr}`);
  t.equal(JSON.parse(whileRunning.stdout).api_keys.length, 1);
  t.match(whileRunning.stderr, `run by the server that holds the embedded database (PID ${first.child.pid})`);

  t.equal(await stop(first), 0, 'SIGTERM drains and exits 0');
  t.match(first.output(), /shutting down/);
  t.notOk(existsSync(join(dataDir, 'admin-channel.json')), 'a stopped server leaves no admin channel behind');

  const listed = spawnSync(process.execPath, [CLI, 'keys', 'list', '--org', 'default'], { env: { PATH: process.env.PATH, COUNTERSIGN_DATA_DIR: dataDir }, encoding: 'utf8' });
  t.equal(listed.status, 0, `the CLI works once the server has stopped: ${listed.stderr}`);
  t.equal(JSON.parse(listed.stdout).api_keys.length, 1);

  const second = await startAuthority({ COUNTERSIGN_DATA_DIR: dataDir });
  t.teardown(() => second.child.kill('SIGKILL'));
  t.notMatch(second.output(), /first start/, 'a restart does not bootstrap again');
  t.equal((await call(`${second.api}/v1-api-key-self`, { authorization: `Bearer ${key}` })).status, 200, 'the data survived the restart');
  t.equal(await stop(second), 0);
});

t.test('the README walkthrough over loopback: evaluate, verify once, export and verify the audit offline', async (t) => {
  const dataDir = await mkdtemp(join(tmpdir(), 'countersign-e2e-'));
  const started = await startAuthority({ COUNTERSIGN_DATA_DIR: dataDir });
  t.teardown(() => started.child.kill('SIGKILL'));
  const { api_key: apiKey } = JSON.parse(await readFile(join(dataDir, 'bootstrap.json'), 'utf8'));
  const client = new CountersignClient({ baseUrl: started.api, apiKey });
  t.teardown(() => client.close());

  const action = { action_type: 'demo.echo', actor_id: 'demo-agent', context: { environment: 'dev', target: { type: 'demo', id: 'hello' } } };
  const decision = await client.evaluate(action);
  t.equal(decision.decision, 'allow');
  t.ok(decision.permit_token);
  const first = await client.verifyPermit({ permit_token: decision.permit_token, ...action });
  t.match(first, { valid: true, consumed: true });
  const second = await client.verifyPermit({ permit_token: decision.permit_token, ...action });
  t.match(second, { valid: false, verify_error_code: 'PERMIT_ALREADY_USED' });
  t.equal((await client.evaluate({ ...action, actor_id: 'unknown-bot' })).decision, 'deny');
  await t.rejects(client.evaluate({ action_type: 'NOT VALID', actor_id: 'x' }), CountersignApiError, 'an error envelope becomes a typed error');
  t.equal((await client.permitKeys()).keys.length, 1);

  const bundleFile = join(dataDir, 'bundle.json');
  const keyFile = join(dataDir, 'audit.pem');
  await writeFile(bundleFile, JSON.stringify(await client.exportAudit()));
  const keys = JSON.parse((await call(`${started.api}/v1/audit/keys`, { authorization: `Bearer ${apiKey}` })).text).keys;
  await writeFile(keyFile, keys[0].public_key_pem);
  const verified = spawnSync(process.execPath, [CLI, 'audit', 'verify', bundleFile, '--key', keyFile], { encoding: 'utf8' });
  t.equal(verified.status, 0, `countersign audit verify accepts the export: ${verified.stdout}${verified.stderr}`);
  const bundle = JSON.parse(await readFile(bundleFile, 'utf8'));
  bundle.events[1].payload.decision = 'deny';
  await writeFile(bundleFile, JSON.stringify(bundle));
  const tampered = spawnSync(process.execPath, [CLI, 'audit', 'verify', bundleFile, '--key', keyFile], { encoding: 'utf8' });
  t.equal(tampered.status, 1, 'and refuses a modified one');
  t.match(tampered.stdout, /modified/);
  t.equal(await stop(started), 0);

  const rotated = spawnSync(process.execPath, [CLI, 'keys', 'rotate-signing'], { env: { PATH: process.env.PATH, COUNTERSIGN_DATA_DIR: dataDir }, encoding: 'utf8' });
  t.equal(rotated.status, 0, rotated.stderr);
  t.equal(JSON.parse(rotated.stdout).published.length, 2, 'rotation publishes the new key beside the old one');
});

t.test('the same command on Postgres and Redis', async (t) => {
  if (!process.env.DATABASE_URL || !process.env.REDIS_URL) {
    t.comment('the Postgres + Redis variant did not run: DATABASE_URL or REDIS_URL is not set');
    return;
  }
  const admin = new pg.Client({ connectionString: process.env.DATABASE_URL });
  await admin.connect();
  const database = `e2e_${Math.random().toString(36).slice(2, 10)}`;
  await admin.query(`CREATE DATABASE ${database}`);
  t.teardown(async () => {
    await admin.query(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`);
    await admin.end();
  });
  const url = new URL(process.env.DATABASE_URL);
  url.pathname = `/${database}`;
  const dataDir = await mkdtemp(join(tmpdir(), 'countersign-e2e-'));
  const bootstrapKey = `ask_live_${'e2eKey'.repeat(7)}`;
  const started = await startAuthority({
    COUNTERSIGN_DATA_DIR: dataDir,
    DATABASE_URL: url.toString(),
    REDIS_URL: process.env.REDIS_URL,
    COUNTERSIGN_BOOTSTRAP_KEY: bootstrapKey,
    COUNTERSIGN_SECRET_KEY: Buffer.alloc(32, 7).toString('base64'),
  });
  t.teardown(() => started.child.kill('SIGKILL'));
  t.match(started.ready, { database: 'postgres', store: 'redis' });
  t.notOk(started.output().includes(bootstrapKey), 'the supplied key is not logged either');
  const self = await call(`${started.api}/v1-api-key-self`, { authorization: `Bearer ${bootstrapKey}` });
  t.equal(self.status, 200);
  t.equal((await call(`${started.api}/readyz`)).status, 200);
  t.equal(await stop(started), 0);
});

t.test('Postgres without Redis is refused unless allowed', async (t) => {
  const result = spawnSync(process.execPath, [CLI, 'authority'], {
    env: { PATH: process.env.PATH, DATABASE_URL: 'postgres://nobody@127.0.0.1:1/none', COUNTERSIGN_DATA_DIR: await mkdtemp(join(tmpdir(), 'cs-')) },
    encoding: 'utf8',
  });
  t.equal(result.status, 2);
  t.match(result.stderr, /REDIS_URL/);
});

t.test('the built CLI is executable, so npx countersign works after npm ci and a build', async (t) => {
  // Regression: npm links the bin before dist/ exists, so the build itself must set the mode.
  t.ok((await stat(CLI)).mode & 0o100, 'dist/bin/countersign.js has its execute bit');
  const help = spawnSync(CLI, ['help'], { encoding: 'utf8' });
  t.equal(help.status, 0);
  t.match(help.stdout, /usage: countersign/);
});

t.test('a bad configuration names the field', async (t) => {
  const result = spawnSync(process.execPath, [CLI, 'authority'], {
    env: { PATH: process.env.PATH, COUNTERSIGN_AUTHORITY_LISTEN: 'nowhere' },
    encoding: 'utf8',
  });
  t.equal(result.status, 2);
  t.match(result.stderr, /listen: expected host:port/);
});
