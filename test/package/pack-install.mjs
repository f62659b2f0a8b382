#!/usr/bin/env node
/**
 * `npm run test:package`: the package as a user gets it. Packs Countersign with `npm pack` (its
 * prepack builds dist/ first, so the tarball is never stale), installs the tarball into an empty
 * folder (its dependencies from npm's cache when they are there, else from the registry: nothing
 * from this clone), and runs the installed command in that folder, through `npx`:
 *
 *   countersign --version         the package's version
 *   countersign policy test       the example policy's tests, shipped in the package
 *   countersign authority         /healthz and /readyz on its admin port, an audit export
 *   countersign audit verify      that export verifies offline, and a tampered copy does not
 *   countersign proxy             in front of nothing, /healthz and /readyz (it got the permit keys)
 *   countersign start             no configuration given: evaluate, the request through the proxy
 *
 * The servers listen on loopback ports the OS picks, keep their data in the temp folder, and stop
 * on SIGTERM (exit 0). Prints one line per check and `N passed, N failed` last, like `npm test`;
 * exits 1 when a check failed.
 *
 * Example:
 *   npm run test:package
 *   node test/package/pack-install.mjs --keep   # keep the temp folder, to look around
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
const { version } = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
/** A server that is not ready by then has failed (a busy 2-core machine starts one in a few seconds). */
const READY_TIMEOUT_MS = 90_000;
/** npm's own commands: pack (which builds) and install (which may download). */
const NPM_TIMEOUT_MS = 10 * 60_000;

/**
 * `npx countersign …` exactly as a user types it, but never fetched from the registry when the
 * installed one is missing (`--no` would do that too, but makes npx take `countersign --version`
 * for its own --version).
 */
const NPX_LOCAL_ONLY = { npm_config_yes: 'false' };

/**
 * The environment of every command the check runs: this process's, without the settings that
 * point Countersign at servers (DATABASE_URL, REDIS_URL, COUNTERSIGN_*), which CI exports for the
 * other suites. The installed package must work on its embedded defaults in an empty folder.
 */
const packageEnv = (extra = {}) => {
  const env = { ...process.env, ...NPX_LOCAL_ONLY };
  for (const name of Object.keys(env)) if (/^(DATABASE_URL|REDIS_|COUNTERSIGN_)/.test(name)) delete env[name];
  return { ...env, ...extra };
};

const counts = { passed: 0, failed: 0 };
const log = (line) => process.stdout.write(`${line}\n`);

function check(ok, what, detail) {
  if (ok) {
    counts.passed++;
    log(`ok - ${what}`);
  } else {
    counts.failed++;
    log(`not ok - ${what}`);
    if (detail) log(String(detail).trimEnd().replace(/^/gm, '    '));
  }
  return ok;
}

/** Runs a command to its end; resolves its exit code and output (stdout and stderr apart). */
function run(command, args, options = {}) {
  return new Promise((resolveRun) => {
    const child = spawn(command, args, { ...options, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (chunk) => (stdout += chunk));
    child.stderr.setEncoding('utf8').on('data', (chunk) => (stderr += chunk));
    const timer = setTimeout(() => child.kill('SIGKILL'), options.timeout ?? NPM_TIMEOUT_MS);
    child.once('error', (error) => {
      clearTimeout(timer);
      resolveRun({ code: null, stdout, stderr: `${stderr}${error.message}` });
    });
    child.once('close', (code) => {
      clearTimeout(timer);
      resolveRun({ code, stdout, stderr });
    });
  });
}

/** Process groups of the servers started, each killed on the way out whatever happened. */
const groups = new Set();
const killGroups = () => {
  for (const pid of groups) {
    try {
      process.kill(-pid, 'SIGKILL');
    } catch {
      // already gone
    }
  }
};
for (const signal of ['SIGINT', 'SIGTERM']) {
  process.on(signal, () => {
    killGroups();
    process.exit(1);
  });
}

/**
 * A `countersign` server started with `npx`, until its JSON log line `message` appears; resolves
 * that line parsed (the addresses it listens on), or rejects with its output. It runs in a process
 * group of its own, so that nothing it started outlives the check.
 */
async function startServer(folder, args, env, message) {
  const child = spawn('npx', ['countersign', ...args], { cwd: folder, env: packageEnv(env), stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  groups.add(child.pid);
  let output = '';
  child.stdout.setEncoding('utf8').on('data', (chunk) => (output += chunk));
  child.stderr.setEncoding('utf8').on('data', (chunk) => (output += chunk));
  const exited = once(child, 'exit');
  const ready = await new Promise((resolveReady, reject) => {
    const timer = setTimeout(() => reject(new Error(`not ready within ${READY_TIMEOUT_MS / 1000} s:\n${output}`)), READY_TIMEOUT_MS);
    const look = () => {
      const line = output.split('\n').find((candidate) => candidate.includes(`"msg":"${message}`));
      if (!line) return;
      clearTimeout(timer);
      resolveReady(JSON.parse(line));
    };
    child.stdout.on('data', look);
    exited.then(([code]) => {
      clearTimeout(timer);
      reject(new Error(`exited with ${code} before it was ready:\n${output}`));
    });
  });
  return {
    ready,
    output: () => output,
    /**
     * SIGTERM to the server (by the pid its log lines carry: `npx` itself passes no SIGTERM on),
     * then `npx`'s exit code, which is the server's: it drains and exits 0.
     */
    async stop() {
      if (child.exitCode === null && child.signalCode === null) {
        try {
          process.kill(ready.pid, 'SIGTERM');
        } catch {
          // it has just exited by itself
        }
        const timer = setTimeout(() => process.kill(-child.pid, 'SIGKILL'), 30_000);
        await exited;
        clearTimeout(timer);
      }
      return child.exitCode ?? child.signalCode;
    },
  };
}

async function http(url, { method = 'GET', headers = {}, body } = {}) {
  const response = await fetch(url, {
    method,
    headers: body === undefined ? headers : { 'content-type': 'application/json', ...headers },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const text = await response.text();
  let json;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: response.status, text, json };
}

async function probesAnswer(name, adminUrl) {
  for (const probe of ['healthz', 'readyz']) {
    const answer = await http(`${adminUrl}/${probe}`);
    check(answer.status === 200, `${name}: GET /${probe} on the admin port answers 200`, `${answer.status} ${answer.text}`);
  }
}

/** `npm pack` into `folder`; resolves the tarball's path and its file list. */
async function pack(folder) {
  const packed = await run('npm', ['pack', '--json', '--pack-destination', folder], { cwd: root });
  if (!check(packed.code === 0, 'npm pack builds and packs the package', `${packed.stderr}${packed.stdout}`)) return undefined;
  const [summary] = JSON.parse(packed.stdout.slice(packed.stdout.indexOf('[')));
  const files = summary.files.map((file) => file.path);
  const required = [
    'package.json',
    'LICENSE',
    'README.md',
    'dist/bin/countersign.js',
    'dist/console/index.html',
    'dist/proxy/ext-authz/protos/envoy/service/auth/v3/external_auth.proto',
    'authority/store/migrations/0001_foundation.sql',
    'config/authority.yaml',
    'config/proxy.yaml',
    'config/policies/default.yaml',
    'config/policies/default.tests.yaml',
  ];
  const missing = required.filter((file) => !files.includes(file));
  check(missing.length === 0, 'the tarball holds the command, the console, the protos, the migrations and the example configuration', `missing: ${missing.join(', ')}`);
  const strays = files.filter((file) => !/^(dist\/(authority|bin|console|proxy|shared)\/|authority\/store\/migrations\/|config\/|(package\.json|README\.md|LICENSE|CHANGELOG\.md)$)/.test(file));
  check(strays.length === 0, 'the tarball holds nothing else (no tests, no sources, no local data)', strays.slice(0, 20).join('\n'));
  return join(folder, summary.filename);
}

async function main() {
  const keep = process.argv.includes('--keep');
  const work = mkdtempSync(join(tmpdir(), 'countersign-package-'));
  const servers = [];
  try {
    log(`node ${process.version}; working in ${work}`);
    const tarball = await pack(work);
    if (!tarball) return;

    // An empty folder, as a user has: the tarball and its dependencies, nothing from the clone.
    const folder = join(work, 'app');
    mkdirSync(folder);
    const installed = await run('npm', ['install', '--prefix', folder, '--no-audit', '--no-fund', '--prefer-offline', '--loglevel=error', tarball], { cwd: folder });
    if (!check(installed.code === 0, 'npm install <tarball> in an empty folder', `${installed.stderr}${installed.stdout}`)) return;
    const countersign = (args, env = {}) => run('npx', ['countersign', ...args], { cwd: folder, env: packageEnv(env), timeout: READY_TIMEOUT_MS });

    const shown = await countersign(['--version']);
    check(shown.code === 0 && shown.stdout.split('\n')[0] === `countersign ${version}`, `npx countersign --version prints ${version}`, `exit ${shown.code}: ${shown.stdout}${shown.stderr}`);

    const tests = await countersign(['policy', 'test', 'node_modules/countersign/config/policies/default.tests.yaml']);
    check(tests.code === 0 && / passed, 0 failed/.test(tests.stdout), "npx countersign policy test passes the example policy's tests", `exit ${tests.code}: ${tests.stdout}${tests.stderr}`);

    // The authority on its built-in defaults, its data in the temp folder.
    const loopback = { COUNTERSIGN_AUTHORITY_LISTEN: '127.0.0.1:0', COUNTERSIGN_AUTHORITY_ADMIN_LISTEN: '127.0.0.1:0', COUNTERSIGN_PROXY_LISTEN: '127.0.0.1:0', COUNTERSIGN_PROXY_ADMIN_LISTEN: '127.0.0.1:0' };
    const authorityData = join(work, 'authority-data');
    const authority = await startServer(folder, ['authority'], { ...loopback, COUNTERSIGN_DATA_DIR: authorityData }, 'authority ready');
    servers.push(authority);
    check(true, 'npx countersign authority starts');
    await probesAnswer('authority', authority.ready.admin);

    const bootstrap = JSON.parse(readFileSync(join(authorityData, 'bootstrap.json'), 'utf8'));
    const admin = { authorization: `Bearer ${bootstrap.api_key}` };
    const exported = await http(`${authority.ready.api}/v1/audit/exports`, { method: 'POST', headers: admin, body: {} });
    const keys = await http(`${authority.ready.api}/v1/audit/keys`, { headers: admin });
    check(exported.status === 200 && keys.status === 200, 'the authority exports its audit log', `${exported.status} ${exported.text.slice(0, 500)}`);
    writeFileSync(join(folder, 'bundle.json'), exported.text);
    writeFileSync(join(folder, 'keys.json'), keys.text);
    const verified = await countersign(['audit', 'verify', 'bundle.json', '--keys', 'keys.json']);
    check(verified.code === 0 && /"ok": true/.test(verified.stdout), 'npx countersign audit verify: the export verifies offline', `exit ${verified.code}: ${verified.stdout}${verified.stderr}`);
    const tampered = JSON.parse(exported.text);
    tampered.events[0].actor_id = 'someone-else';
    writeFileSync(join(folder, 'tampered.json'), JSON.stringify(tampered));
    const refused = await countersign(['audit', 'verify', 'tampered.json', '--keys', 'keys.json']);
    check(refused.code === 1, 'npx countersign audit verify: a modified export fails (exit 1)', `exit ${refused.code}: ${refused.stdout}${refused.stderr}`);

    // The proxy as a separate process: its own key (verify:execute), the authority's organization.
    const proxyKey = await http(`${authority.ready.api}/v1/api-keys`, { method: 'POST', headers: admin, body: { name: 'gate', scopes: ['verify:execute'] } });
    writeFileSync(join(work, 'proxy.key'), `${proxyKey.json?.secret}\n`, { mode: 0o600 });
    writeFileSync(
      join(folder, 'proxy.yaml'),
      [
        'upstream: http://127.0.0.1:9',
        `authority: { url: "${authority.ready.api}", api_key_file: "${join(work, 'proxy.key')}" }`,
        `organization: ${bootstrap.organization_id}`,
        'allow_in_process_store: true',
        'routes:',
        '  - name: echo',
        '    match: { method: POST, path: /echo/:id }',
        '    action_type: demo.echo',
        '    facts: { actor_id: { permit: true }, environment: { const: dev }, target: { type: { const: demo }, id: { path: id } } }',
        '',
      ].join('\n'),
    );
    const proxy = await startServer(folder, ['proxy', '--config', 'proxy.yaml'], loopback, 'proxy listening');
    servers.push(proxy);
    check(true, 'npx countersign proxy starts');
    await probesAnswer('proxy', proxy.ready.admin);
    check((await proxy.stop()) === 0, 'the proxy drains and exits 0 on SIGTERM', proxy.output());
    check((await authority.stop()) === 0, 'the authority drains and exits 0 on SIGTERM', authority.output());

    // `start` with no configuration named: the development configuration and the example routes
    // shipped in the package.
    const startData = join(work, 'start-data');
    const started = await startServer(folder, ['start', '--upstream-listen', '127.0.0.1:0'], { ...loopback, COUNTERSIGN_DATA_DIR: startData }, 'ready:');
    servers.push(started);
    check(true, 'npx countersign start starts the authority, the demo upstream and the proxy');
    const [authorityAdmin, proxyAdmin] = started.ready.admin;
    await probesAnswer('start (authority)', authorityAdmin);
    await probesAnswer('start (proxy)', proxyAdmin);
    const startKey = JSON.parse(readFileSync(join(startData, 'bootstrap.json'), 'utf8')).api_key;
    const decision = await http(`${started.ready.authority}/v1/evaluate`, {
      method: 'POST',
      headers: { authorization: `Bearer ${startKey}` },
      body: { action_type: 'demo.echo', actor_id: 'demo-agent', context: { environment: 'dev', target: { type: 'demo', id: 'order-42' } } },
    });
    check(decision.json?.decision === 'allow', 'start: the example policy allows demo.echo', decision.text);
    const through = await http(`${started.ready.proxy}/echo/order-42`, {
      method: 'POST',
      headers: { 'x-service-permit': decision.json?.permit_token ?? '', 'x-actor-id': 'demo-agent' },
      body: { hello: 'world' },
    });
    check(through.status === 200 && through.json?.echoed === 'order-42', 'start: the permitted request passes the proxy and reaches the demo upstream', `${through.status} ${through.text}`);
    const page = await http(`${started.ready.authority}/console/`);
    check(page.status === 200 && page.text.includes('<'), 'start: the console is served', `${page.status}`);
    check((await started.stop()) === 0, 'start drains and exits 0 on SIGTERM', started.output());
  } catch (error) {
    check(false, 'the package check ran to its end', error?.stack ?? error);
  } finally {
    for (const server of servers) await server.stop().catch(() => {});
    killGroups();
    if (keep) log(`kept ${work}`);
    else rmSync(work, { recursive: true, force: true });
  }
}

await main();
log(`${counts.passed} passed, ${counts.failed} failed`);
process.exit(counts.failed > 0 ? 1 : 0);
