/**
 * The authority's admin channel, over real HTTP on loopback: with the embedded database it
 * announces itself in `<data dir>/admin-channel.json` (mode 0600) and runs administration
 * commands only for a caller that presents that file's token; without the token, with another
 * token, or from another machine it refuses before looking at the command, and nothing runs. A
 * command it does not know, or input its schema refuses, is a 400 with what is wrong; a failing
 * one a 500 that says what failed. On Postgres, where the CLI opens the database itself, there is
 * no channel at all. When the authority stops, the file is gone.
 */
import { existsSync } from 'node:fs';
import { mkdtemp, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { CHANNEL_FILE, readChannelFile } from '../../authority/admin-channel/channel.js';
import { parseAuthorityConfig } from '../../authority/config.js';
import { startAuthority } from '../../authority/main.js';
import { createLogger } from '../../shared/logging.js';
import { ErrorEnvelope } from '../../shared/wire/envelope.js';
import { dbBackends, postgresSkipReason } from '../helpers/db.js';

const silent = () => createLogger({ name: 'authority', level: 'silent' });

async function send(url: string, body: unknown, token?: string) {
  const response = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(token === undefined ? {} : { authorization: `Bearer ${token}` }) },
    body: JSON.stringify(body),
  });
  return { status: response.status, body: (await response.json()) as Record<string, unknown> };
}

t.test('the embedded authority takes administration commands from the holder of its channel file only', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'countersign-channel-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const config = parseAuthorityConfig({ data_dir: join(dir, 'data'), listen: '127.0.0.1:0', admin_listen: '127.0.0.1:0', log_level: 'silent' });
  const running = await startAuthority(config, { env: {}, logger: silent() });
  let closed = false;
  t.teardown(() => (closed ? undefined : running.close()));

  const file = join(config.data_dir, CHANNEL_FILE);
  t.equal((await stat(file)).mode & 0o777, 0o600, 'the channel file is readable by its owner only');
  const channel = await readChannelFile(config.data_dir);
  t.match(channel, { pid: process.pid, url: running.adminUrl }, 'it names this process and its admin listener');
  const url = `${running.adminUrl}/admin/commands`;
  const listKeys = { command: 'keys list', input: { org: 'default' } };
  const keyCount = async () => ((await send(url, listKeys, channel?.token)).body.output as { api_keys: unknown[] }).api_keys.length;
  t.equal(await keyCount(), 1, 'with the token, a command runs: the bootstrap key is listed');

  const create = { command: 'keys create', input: { org: 'default', name: 'sneaky', scopes: ['keys:write'] } };
  // Its last character replaced by another one (never by itself, which would leave the token as it was).
  const channelToken = channel?.token ?? '';
  const changed = `${channelToken.slice(0, -1)}${channelToken.endsWith('A') ? 'B' : 'A'}`;
  for (const [what, token] of [['no token', undefined], ['another token', 'x'.repeat(43)], ['the token with a byte changed', changed]] as const) {
    const refused = await send(url, create, token);
    t.equal(refused.status, 401, `${what}: 401`);
    t.equal(ErrorEnvelope.parse(refused.body).error, 'unauthorized');
  }
  // Only an in-process request can come from another address on one machine.
  const remote = await running.admin.inject({ method: 'POST', url: '/admin/commands', remoteAddress: '192.0.2.10', headers: { authorization: `Bearer ${channel?.token}`, 'content-type': 'application/json' }, payload: JSON.stringify(create) });
  t.equal(remote.statusCode, 403, 'from another machine, even with the token: 403');
  t.equal(await keyCount(), 1, 'none of the refused commands ran');

  const unknown = await send(url, { command: 'drop database', input: {} }, channel?.token);
  t.equal(unknown.status, 400);
  t.match(unknown.body, { error: 'invalid_request', message: 'unknown command: drop database' });
  const bad = await send(url, { command: 'keys create', input: { org: 'default', name: 'ci', scopes: ['evaluate'] } }, channel?.token);
  t.equal(bad.status, 400, 'input the command refuses: 400');
  t.match(bad.body.message, /resource:action/);
  const noOrg = await send(url, { command: 'keys list', input: { org: 'nope' } }, channel?.token);
  t.match(noOrg, { status: 400, body: { message: 'no organization "nope"' } }, 'a usage error found while running: 400 with its message');
  const twice = await send(url, { command: 'orgs create', input: { name: 'default' } }, channel?.token);
  t.equal(twice.status, 500, 'a failure: 500');
  t.match(twice.body.message, /^orgs create failed: /, 'saying what failed');

  await running.close();
  closed = true;
  t.notOk(existsSync(file), 'once the authority has stopped, the channel file is gone');
});

t.test('on Postgres there is no admin channel: the CLI opens the database itself', async (t) => {
  const postgres = dbBackends().find((backend) => backend.name === 'postgres');
  if (!postgres) {
    t.comment(postgresSkipReason() ?? 'postgres variant not run');
    return;
  }
  const opened = await postgres.open();
  t.teardown(opened.cleanup);
  const dir = await mkdtemp(join(tmpdir(), 'countersign-channel-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const config = parseAuthorityConfig({
    data_dir: join(dir, 'data'),
    database_url: opened.url,
    secret_key: Buffer.alloc(32, 7).toString('base64'),
    allow_in_process_store: true,
    listen: '127.0.0.1:0',
    admin_listen: '127.0.0.1:0',
    log_level: 'silent',
  });
  const running = await startAuthority(config, { env: {}, logger: silent() });
  t.teardown(() => running.close());
  t.notOk(existsSync(join(config.data_dir, CHANNEL_FILE)), 'no channel file');
  const answer = await fetch(`${running.adminUrl}/admin/commands`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ command: 'orgs list', input: {} }) });
  t.equal(answer.status, 404, 'and no channel on the admin listener');
});
