/**
 * The receiver of docs/webhooks.md ("A receiver") runs as written: the code block is saved as
 * receiver.mjs and started with `node receiver.mjs`, then sent deliveries signed by the authority's
 * own signer (buildAttemptRequest, what the webhook worker sends). A correctly signed one is
 * answered 204 and handled once, however often it arrives; a tampered body, another secret, a
 * stale timestamp or a missing signature is answered 401 and not handled.
 *
 * @example
 *   npx tap --disable-coverage dist/test/docs/webhook-receiver.test.js
 */
import { spawn } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdtemp, readFile, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { request } from 'undici';
import type { ClaimedAttempt } from '../../authority/webhooks/deliveries.js';
import { buildAttemptRequest } from '../../authority/webhooks/worker.js';
import { repoPath } from '../helpers/repo.js';

/** The first ```js block under the page's "## A receiver" heading, exactly as a reader copies it. */
async function receiverExample(): Promise<string> {
  const page = await readFile(repoPath('docs', 'webhooks.md'), 'utf8');
  const section = page.slice(page.indexOf('\n## A receiver\n'));
  const block = /\n```js\n([\s\S]*?)\n```\n/.exec(section.slice(0, section.indexOf('\n## ', 1)));
  if (!block) throw new Error('docs/webhooks.md: no ```js block in "A receiver"');
  return `${block[1]}\n`;
}

const secret = `whsec_${randomBytes(24).toString('base64')}`;

/** A delivery as the worker claims it, for the signer. */
const claimed = (eventType = 'permit.verified'): ClaimedAttempt => ({
  deliveryId: randomUUID(),
  orgId: randomUUID(),
  subscriptionId: randomUUID(),
  eventType,
  payload: { permit_id: 'pmt_example', decision: 'allow' },
  attempt: 1,
  round: 1,
  maxAttempts: 8,
  url: 'http://127.0.0.1/hooks',
  timeoutSeconds: 15,
  secretSealed: 'unused by the signer',
});

t.test('the receiver of docs/webhooks.md runs with node as written and accepts only what the authority signed', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'webhook-receiver-'));
  const file = join(dir, 'receiver.mjs');
  await writeFile(file, await receiverExample());

  const child = spawn(process.execPath, [file], { cwd: dir, env: { PATH: process.env.PATH, WEBHOOK_SECRET: secret, PORT: '0' } });
  t.teardown(() => child.kill('SIGKILL'));
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk) => (stdout += String(chunk)));
  child.stderr.on('data', (chunk) => (stderr += String(chunk)));
  const base = await new Promise<string>((resolve, reject) => {
    child.stdout.on('data', () => {
      const listening = /listening on (http:\/\/127\.0\.0\.1:\d+)/.exec(stdout);
      if (listening) resolve(listening[1]!);
    });
    child.once('exit', (code) => reject(new Error(`node receiver.mjs exited with ${code}:\n${stderr}`)));
  });

  const send = async (headers: Record<string, string>, body: string) => {
    const response = await request(`${base}/hooks`, { method: 'POST', headers, body });
    await response.body.dump();
    return response.statusCode;
  };
  const handled = () => stdout.split('\n').filter((line) => line.startsWith('permit.verified '));

  const delivery = claimed();
  const signed = buildAttemptRequest(delivery, secret, new Date());
  t.equal(await send(signed.headers, signed.body), 204, 'a delivery the authority signed: 204');
  t.equal(await send(signed.headers, signed.body), 204, 'the same delivery again (a retry): 204');
  t.same(handled(), [`permit.verified ${JSON.stringify(delivery.payload)}`], 'handled once: event type and payload');

  const other = buildAttemptRequest(claimed(), secret, new Date());
  t.equal(await send(other.headers, other.body.replace('"allow"', '"deny"')), 401, 'a body changed after signing: 401');
  const wrongSecret = buildAttemptRequest(claimed(), `whsec_${randomBytes(24).toString('base64')}`, new Date());
  t.equal(await send(wrongSecret.headers, wrongSecret.body), 401, 'signed with another secret: 401');
  const stale = buildAttemptRequest(claimed(), secret, new Date(Date.now() - 10 * 60 * 1000));
  t.equal(await send(stale.headers, stale.body), 401, 'signed ten minutes ago (a replay): 401');
  const { 'x-service-signature-256': _signature, ...unsigned } = buildAttemptRequest(claimed(), secret, new Date()).headers;
  t.equal(await send(unsigned, other.body), 401, 'no signature: 401');
  t.equal(handled().length, 1, 'none of the refused deliveries was handled');
  t.equal(stderr, '', 'nothing on stderr');
});
