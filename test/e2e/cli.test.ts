/**
 * The `countersign` command as a user meets it (the compiled CLI in dist/, which `npm test` builds
 * first): --version, --help for every command in the catalogue with an example each, usage
 * errors that show the usage of that command only (exit 2), migrate saying what it applied, the
 * administration commands run by the server that holds the embedded data directory, and exit 3
 * with what to do when that server cannot take them.
 */
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { mkdtemp, readFile, stat, unlink } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import t, { type Test } from 'tap';
import { COMMANDS, EXIT_CODES, topLevelNames, subcommandsOf } from '../../bin/catalogue.js';

const CLI = resolve('dist/bin/countersign.js');
const VERSION = (JSON.parse(readFileSync(resolve('package.json'), 'utf8')) as { version: string }).version;

const cli = (args: string[], env: Record<string, string> = {}) =>
  spawnSync(process.execPath, [CLI, ...args], { env: { PATH: process.env.PATH, ...env }, encoding: 'utf8', cwd: resolve('.') });

// Over 70 CLI processes, each a Node start (some with an embedded database): longer than .taprc's
// two minutes per file while the other test files keep a 2-core machine busy.
t.setTimeout(10 * 60_000);

t.before(() => {
  if (!existsSync(CLI)) throw new Error('dist/bin/countersign.js is missing: run `npm run build` (npm test does it first)');
});

t.test('--version, -v and version print the version from package.json', async (t) => {
  for (const flag of ['--version', '-v', 'version']) {
    const result = cli([flag]);
    t.equal(result.status, 0, flag);
    t.equal(result.stdout.split('\n')[0], `countersign ${VERSION}`, flag);
  }
});

t.test('--help lists every command with its summary, and the exit codes', async (t) => {
  for (const args of [['--help'], ['-h'], ['help']]) {
    const result = cli(args);
    t.equal(result.status, 0, args.join(' '));
    for (const entry of COMMANDS) t.match(result.stdout, `  ${entry.name}`, `${entry.name} is listed`);
    for (const [code, meaning] of EXIT_CODES) t.match(result.stdout, `${code}  ${meaning}`, `exit code ${code} is documented`);
  }
  const none = cli([]);
  t.equal(none.status, 2, 'no command is a usage error');
  t.match(none.stderr, /countersign: no command given/);
});

t.test('every command and subcommand answers --help, -h and help with its usage and an example', async (t) => {
  for (const entry of COMMANDS) {
    const words = entry.name.split(' ');
    for (const args of [[...words, '--help'], [...words, '-h'], ['help', ...words]]) {
      const result = cli(args);
      t.equal(result.status, 0, `countersign ${args.join(' ')} exits 0`);
      t.match(result.stdout, `usage: countersign ${entry.usage[0]}`, `${args.join(' ')}: the usage`);
      t.match(result.stdout, /^examples?:$/m, `${args.join(' ')}: an example`);
      for (const example of entry.examples) t.match(result.stdout, example.command);
      t.equal(result.stderr, '');
    }
  }
  const withOtherOptions = cli(['keys', 'create', '--org', 'acme', '--help']);
  t.equal(withOtherOptions.status, 0, '--help wins over the other options, and nothing is created');
  t.match(withOtherOptions.stdout, 'usage: countersign keys create');
});

t.test('a command with subcommands lists them on --help', async (t) => {
  const groups = topLevelNames().filter((name) => subcommandsOf(name).length > 0);
  t.same(groups, ['orgs', 'keys', 'audit', 'policy']);
  for (const group of groups) {
    const result = cli([group, '--help']);
    t.equal(result.status, 0, group);
    for (const sub of subcommandsOf(group)) {
      t.match(result.stdout, `countersign ${sub.usage[0]}`, `${group} --help shows ${sub.name}`);
      t.match(result.stdout, `e.g. ${sub.examples[0]?.command}`, `and its first example`);
    }
  }
});

/** The usage shown under an error is that command's only: no other command's synopsis. */
function onlyUsageOf(t: Test, stderr: string, name: string) {
  const shown = COMMANDS.filter((entry) => stderr.includes(`countersign ${entry.usage[0]}`)).map((entry) => entry.name);
  t.same(shown, [name], `only the usage of ${name}`);
  t.match(stderr, `run 'countersign ${name} --help' for the options and an example`);
}

t.test('usage errors: what is wrong, the usage of that command only, exit 2', async (t) => {
  const unknownOption = cli(['keys', 'create', '--org', 'acme', '--nmae', 'ci']);
  t.equal(unknownOption.status, 2);
  t.match(unknownOption.stderr, /^countersign: unknown option --nmae \(did you mean --name\?\)/);
  t.notMatch(unknownOption.stderr, /positional argument|Unknown option/, "not Node's parser message");
  onlyUsageOf(t, unknownOption.stderr, 'keys create');

  const missing = cli(['keys', 'create', '--name', 'ci', '--scopes', 'evaluate:write']);
  t.equal(missing.status, 2);
  t.match(missing.stderr, /^countersign: --org is required/);
  onlyUsageOf(t, missing.stderr, 'keys create');

  const past = cli(['keys', 'create', '--org', 'acme', '--name', 'ci', '--scopes', 'audit:read', '--expires-at', '2020-01-01T00:00:00Z']);
  t.equal(past.status, 2, 'an expiry already past is a usage error');
  t.match(past.stderr, /^countersign: --expires-at must be in the future: 2020-01-01T00:00:00Z has passed/);
  onlyUsageOf(t, past.stderr, 'keys create');

  const noValue = cli(['keys', 'list', '--org']);
  t.equal(noValue.status, 2);
  t.match(noValue.stderr, /^countersign: --org needs a value/);
  onlyUsageOf(t, noValue.stderr, 'keys list');

  const extra = cli(['orgs', 'list', 'everything']);
  t.equal(extra.status, 2);
  t.match(extra.stderr, /^countersign: unexpected argument 'everything'/);
  onlyUsageOf(t, extra.stderr, 'orgs list');

  const badUpstream = cli(['start', '--upstream', 'ftp://files.example']);
  t.equal(badUpstream.status, 2, 'start --upstream takes http or https only');
  t.match(badUpstream.stderr, /^countersign: --upstream must be an http or https URL/);
  onlyUsageOf(t, badUpstream.stderr, 'start');

  const auditOption = cli(['audit', 'verify', 'bundle.json', '--keey', 'keys.json']);
  t.equal(auditOption.status, 2);
  t.match(auditOption.stderr, /^countersign: unknown option --keey \(did you mean --key/);
  onlyUsageOf(t, auditOption.stderr, 'audit verify');
});

t.test('an unknown command suggests the closest one, exit 2', async (t) => {
  const typo = cli(['kyes', 'list']);
  t.equal(typo.status, 2);
  t.match(typo.stderr, /^countersign: unknown command 'kyes' \(did you mean 'keys'\?\)/);
  t.notMatch(typo.stderr, /keys create --org/, 'not the whole catalogue');

  const sub = cli(['orgs', 'craete', '--name', 'acme']);
  t.equal(sub.status, 2);
  t.match(sub.stderr, /^countersign: unknown command 'orgs craete' \(did you mean 'orgs create'\?\)/);
  t.match(sub.stderr, 'countersign orgs create --name NAME');
  t.notMatch(sub.stderr, /countersign keys /, 'only the orgs subcommands');

  const bare = cli(['keys']);
  t.equal(bare.status, 2);
  t.match(bare.stderr, /^countersign: keys needs a subcommand: create, list, revoke, rotate-signing/);
});

t.test('a runtime failure says what happened and what to check, exit 1', async (t) => {
  const unreachable = cli(['orgs', 'list'], { DATABASE_URL: 'postgres://nobody@127.0.0.1:1/none' });
  t.equal(unreachable.status, 1);
  t.match(unreachable.stderr, /^countersign: connect ECONNREFUSED 127\.0\.0\.1:1\n/);
  t.match(unreachable.stderr, /check that the server runs and that DATABASE_URL/);
  t.notMatch(unreachable.stderr, /usage:/, 'no usage: the invocation was right');
});

t.test('migrate on an empty data directory lists what it applied, then says the schema is up to date', async (t) => {
  const dataDir = await mkdtemp(join(tmpdir(), 'countersign-cli-'));
  const first = cli(['migrate'], { COUNTERSIGN_DATA_DIR: dataDir });
  t.equal(first.status, 0, first.stderr);
  const { applied } = JSON.parse(first.stdout) as { applied: string[] };
  t.ok(applied.length >= 10, `every migration is applied (${applied.length})`);
  t.equal(applied[0], '0001_foundation');
  t.same([...applied].sort(), applied, 'in order');
  t.match(first.stderr, `applied ${applied.length} migrations: 0001_foundation, `);

  const second = cli(['migrate'], { COUNTERSIGN_DATA_DIR: dataDir });
  t.equal(second.status, 0);
  t.same(JSON.parse(second.stdout), { applied: [] });
  t.match(second.stderr, /the schema is up to date/);
});

/** `countersign authority` on its own data directory and loopback ports; resolves with its ready line once it is ready. */
async function runningAuthority(t: Test) {
  const dataDir = await mkdtemp(join(tmpdir(), 'countersign-cli-'));
  const env = { COUNTERSIGN_DATA_DIR: dataDir, COUNTERSIGN_AUTHORITY_LISTEN: '127.0.0.1:0', COUNTERSIGN_AUTHORITY_ADMIN_LISTEN: '127.0.0.1:0' };
  const server = spawn(process.execPath, [CLI, 'authority'], { env: { PATH: process.env.PATH, ...env } });
  t.teardown(() => server.kill('SIGKILL'));
  let output = '';
  server.stdout.on('data', (chunk) => (output += String(chunk)));
  server.stderr.on('data', (chunk) => (output += String(chunk)));
  const ready = await new Promise<{ api: string; admin: string }>((resolveReady, reject) => {
    server.stdout.on('data', () => {
      const line = output.split('\n').find((candidate) => candidate.includes('"msg":"authority ready'));
      if (line) resolveReady(JSON.parse(line));
    });
    server.once('exit', (code) => reject(new Error(`the authority exited with ${code}:\n${output}`)));
  });
  return { dataDir, env, server, api: ready.api, output: () => output };
}

/** GET /v1/api-key-self with `key`: its status, and its scopes when it authenticates. */
async function keySelf(api: string, key: string): Promise<{ status: number; scopes?: string[] }> {
  const response = await fetch(`${api}/v1/api-key-self`, { headers: { authorization: `Bearer ${key}` } });
  return { status: response.status, ...((await response.json()) as { scopes?: string[] }) };
}

t.test('while a server holds the embedded data directory, it runs the admin commands', async (t) => {
  const { dataDir, env, server, api, output } = await runningAuthority(t);
  const channelFile = join(dataDir, 'admin-channel.json');
  t.equal((await stat(channelFile)).mode & 0o777, 0o600, 'the channel file is readable by its owner only');

  const create = cli(['keys', 'create', '--org', 'default', '--name', 'approver', '--scopes', 'approvals:write,hitl:approve'], env);
  t.equal(create.status, 0, `keys create works while the server runs: ${create.stderr}`);
  t.match(create.stderr, `keys create was run by the server that holds the embedded database (PID ${server.pid})`);
  const created = JSON.parse(create.stdout) as { api_key: { id: string; owner: string }; secret: string };
  t.equal(created.api_key.owner, `api_key:${created.api_key.id}`, 'the key is its own root identity');
  t.match(await keySelf(api, created.secret), { status: 200, scopes: ['approvals:write', 'hitl:approve'] }, 'and the running server accepts it at once');
  t.notOk(output().includes(created.secret), "the server's log never holds the secret");
  t.notOk(output().includes(JSON.parse(await readFile(channelFile, 'utf8')).token), 'nor the channel token');

  const org = cli(['orgs', 'create', '--name', 'second'], env);
  t.equal(org.status, 0, org.stderr);
  t.same((JSON.parse(cli(['orgs', 'list'], env).stdout) as { organizations: Array<{ name: string }> }).organizations.map((each) => each.name).sort(), ['default', 'second']);
  const listed = JSON.parse(cli(['keys', 'list', '--org', 'default'], env).stdout) as { api_keys: Array<{ id: string }> };
  t.ok(listed.api_keys.some((key) => key.id === created.api_key.id), 'keys list shows the new key');
  t.notOk(JSON.stringify(listed).includes(created.secret), 'never its secret');

  const rotated = cli(['keys', 'rotate-signing', '--purpose', 'audit'], env);
  t.equal(rotated.status, 0, rotated.stderr);
  t.match(JSON.parse(rotated.stdout), { purpose: 'audit', kid: String, published: Array });
  const migrated = cli(['migrate'], env);
  t.same(JSON.parse(migrated.stdout), { applied: [] }, 'migrate: the server is up to date');
  t.match(migrated.stderr, /the schema is up to date/);

  const revoke = cli(['keys', 'revoke', created.api_key.id, '--org', 'default'], env);
  t.equal(revoke.status, 0, revoke.stderr);
  t.equal((await keySelf(api, created.secret)).status, 401, 'a key revoked through the server stops working at once');

  const wrongOrg = cli(['keys', 'create', '--org', 'nope', '--name', 'x', '--scopes', 'audit:read'], env);
  t.equal(wrongOrg.status, 2, 'a usage error the server finds is still exit 2');
  t.match(wrongOrg.stderr, /^countersign: no organization "nope"/);

  const replay = cli(['policy', 'replay', '--policy', 'config/policies/default.yaml'], env);
  t.equal(replay.status, 3, 'policy replay is not run by the server: exit 3');
  t.match(replay.stderr, `kill -TERM ${server.pid}`);
});

t.test('a server that cannot take the command: admin commands exit 3 and say how to do it instead', async (t) => {
  const { dataDir, env, server } = await runningAuthority(t);
  // As with a server that offers no admin channel.
  await unlink(join(dataDir, 'admin-channel.json'));

  const create = cli(['keys', 'create', '--org', 'default', '--name', 'ci', '--scopes', 'evaluate:write,verify:execute'], env);
  t.equal(create.status, 3);
  t.equal(create.stdout, '', 'nothing on stdout');
  t.match(create.stderr, `is in use by a running server (PID ${server.pid})`);
  t.match(create.stderr, 'keys create did not run and changed nothing');
  t.match(create.stderr, "curl -X POST http://127.0.0.1:0/v1/api-keys -H \"authorization: Bearer $(jq -r .api_key ");
  t.match(create.stderr, `-d '{"name":"ci","scopes":["evaluate:write","verify:execute"]}'`, 'the API call does what the command was asked');
  t.match(create.stderr, /stop the server/);
  t.match(create.stderr, /DATABASE_URL/);

  const revoke = cli(['keys', 'revoke', 'some-key-id', '--org', 'default'], env);
  t.equal(revoke.status, 3);
  t.match(revoke.stderr, '/v1/api-keys/some-key-id/revoke');

  for (const args of [['migrate'], ['orgs', 'list'], ['keys', 'rotate-signing']]) {
    const result = cli(args, env);
    t.equal(result.status, 3, `${args.join(' ')} exits 3`);
    t.match(result.stderr, `kill -TERM ${server.pid}`, `${args.join(' ')} says how to stop the server`);
  }
  t.match(cli(['migrate'], env).stderr, /applied every pending migration when it started/);

  server.kill('SIGTERM');
  await new Promise((done) => server.once('exit', done));
  const after = cli(['orgs', 'list'], env);
  t.equal(after.status, 0, `once the server stopped the command works: ${after.stderr}`);
  t.equal((JSON.parse(after.stdout) as { organizations: unknown[] }).organizations.length, 1);
});
