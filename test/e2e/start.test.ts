/**
 * `npm start` for real (`countersign start`): the authority, the demo upstream and the proxy in
 * one process on embedded defaults. The README walkthrough: evaluate → the request through the
 * proxy with the permit → the upstream answers → the audit log holds the whole chain; without a
 * permit, or with it a second time, the upstream is not reached. Runs the compiled CLI (dist/),
 * which `npm test` builds first.
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, readFile, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import t from 'tap';
import { request } from 'undici';

const CLI = resolve('dist/bin/countersign.js');

t.test('npm start: evaluate, then the request through the proxy reaches the upstream exactly once', async (t) => {
  const dataDir = await mkdtemp(join(tmpdir(), 'countersign-start-'));
  const child = spawn(process.execPath, [CLI, 'start', '--config', 'config/authority.yaml', '--upstream-listen', '127.0.0.1:0'], {
    env: {
      PATH: process.env.PATH,
      COUNTERSIGN_DATA_DIR: dataDir,
      COUNTERSIGN_AUTHORITY_LISTEN: '127.0.0.1:0',
      COUNTERSIGN_AUTHORITY_ADMIN_LISTEN: '127.0.0.1:0',
      COUNTERSIGN_PROXY_LISTEN: '127.0.0.1:0',
      COUNTERSIGN_PROXY_ADMIN_LISTEN: '127.0.0.1:0',
    },
    cwd: resolve('.'),
  });
  t.teardown(() => child.kill('SIGKILL'));
  let output = '';
  child.stdout.on('data', (chunk) => (output += String(chunk)));
  child.stderr.on('data', (chunk) => (output += String(chunk)));
  const ready = await new Promise<Record<string, string>>((resolveReady, reject) => {
    child.stdout.on('data', () => {
      const line = output.split('\n').find((candidate) => candidate.includes('"msg":"ready:'));
      if (line) resolveReady(JSON.parse(line));
    });
    child.once('exit', (code) => reject(new Error(`countersign start exited with ${code}:\n${output}`)));
  });

  const { api_key: apiKey } = JSON.parse(await readFile(join(dataDir, 'bootstrap.json'), 'utf8'));
  const post = async (url: string, body: unknown, headers: Record<string, string> = {}) => {
    const response = await request(url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
    return { status: response.statusCode, json: (await response.body.json()) as Record<string, unknown> };
  };
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
