/**
 * Policy replay (`countersign policy replay`): evaluations recorded through the real evaluate
 * path, decided again under a candidate policy. Under the policy that decided them nothing
 * changes (approvals, refusals and escalation votes included); under a candidate, exactly the
 * decisions it changes are reported, grouped by action class; --since, --org and --limit narrow
 * it; nothing is written. The CLI function runs it end to end on an embedded data directory and
 * on Postgres.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import type { CliIo } from '../../authority/cli/admin-commands.js';
import { runPolicyCommand } from '../../authority/cli/policy-commands.js';
import { compilePolicy } from '../../authority/policy/compile.js';
import { parseSince, replayEvaluations, type ReplayReport } from '../../authority/policy/replay/replay.js';
import type { CompiledPolicy } from '../../authority/policy/types.js';
import type { Db } from '../../authority/store/db.js';
import { migrate } from '../../authority/store/migrate.js';
import { openDb } from '../../authority/store/open.js';
import { MemoryStore } from '../../shared/store/memory.js';
import { EvaluateResponse } from '../../shared/wire/evaluate.js';
import { createTestAuthority, GENEROUS_LIMITS, type TestAuthority } from '../helpers/authority.js';
import type { OpenedBackend } from '../helpers/backends.js';
import { ManualClock } from '../helpers/clock.js';
import { dbBackends, postgresSkipReason, type OpenedDb } from '../helpers/db.js';
import { repoPath } from '../helpers/repo.js';

const DAY = 86_400_000;

const made: string[] = [];
t.teardown(() => {
  for (const dir of made) rmSync(dir, { recursive: true, force: true });
});
/** A temporary directory, removed when the file's tests end. */
function tempDir(prefix: string): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  made.push(dir);
  return dir;
}
const EXAMPLE = readFileSync(repoPath('config', 'policies', 'default.yaml'), 'utf8');
/** The example policy with payments held above 1,000 USD instead of 10,000, and send_email off the agents' allowlist. */
const CANDIDATE = EXAMPLE.replace(/\b10000\b/g, '1000').replace(
  `when: 'context.target.id.matches("^([^/]+/)?(send_email|create_ticket|update_ticket)$")'`,
  `when: 'context.target.id.matches("^([^/]+/)?(create_ticket|update_ticket)$")'`,
);

function compiled(source: string): CompiledPolicy {
  const result = compilePolicy(source);
  if (!result.ok) throw new Error(JSON.stringify(result.errors));
  return result.policy;
}

const wire = (amount: number, approvals?: string[]) => ({
  action_type: 'payments.wire',
  actor_id: 'finance-bot',
  context: { environment: 'production', amount_usd: amount, account_code: 'OPS-001', ...(approvals ? { approvals } : {}) },
});
const tool = (id: string) => ({ actor: { id: 'support-agent', type: 'agent' }, action: { type: 'agent.tool.invoke' }, target: { type: 'tool', id, environment: 'production' } });

async function post(authority: TestAuthority, url: string, body: unknown, token = authority.acmeAdmin) {
  return authority.app.inject({ method: 'POST', url, headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' }, payload: JSON.stringify(body) });
}
async function evaluate(authority: TestAuthority, body: unknown, token?: string): Promise<EvaluateResponse> {
  const response = await post(authority, '/v1/evaluate', body, token);
  if (response.statusCode !== 200) throw new Error(`evaluate answered ${response.statusCode}: ${response.body}`);
  return EvaluateResponse.parse(response.json());
}

/** A test authority over an opened database, with the in-process store. */
function authorityOn(opened: OpenedDb, clock: ManualClock): Promise<TestAuthority> {
  const store = new MemoryStore({ now: () => clock.now() });
  const backend: OpenedBackend = { db: opened.db, store, openPeerStore: () => store, cleanup: () => opened.cleanup(), ...(opened.url ? { url: opened.url } : {}) };
  return createTestAuthority(backend, { config: GENEROUS_LIMITS, clock });
}

interface Recorded {
  /** Evaluations recorded within the last day, per organization. */
  recent: { acme: number; globex: number };
}

/**
 * Three days ago: one 5,000 USD wire (allowed). Today: small and large wires, a hold approved
 * and used, an escalation voted through and used (then reused: refused), agent tools, a stranger,
 * and one 5,000 USD wire in the other organization.
 */
async function record(authority: TestAuthority): Promise<Recorded> {
  const expect = (response: EvaluateResponse, decision: string) => {
    if (response.decision !== decision) throw new Error(`expected ${decision}, got ${JSON.stringify(response.decisionObject)}`);
  };
  expect(await evaluate(authority, wire(5_000)), 'allow');
  authority.clock.advance(3 * DAY);

  let acme = 0;
  const recent = async (body: unknown, decision: string) => {
    expect(await evaluate(authority, body), decision);
    acme += 1;
  };
  await recent(wire(500), 'allow');
  await recent(wire(5_000), 'allow');
  const held = await evaluate(authority, wire(50_000));
  expect(held, 'hold');
  acme += 1;
  const holdId = held.approval_request_id as string;
  await recent(wire(50_000, [holdId]), 'deny'); // APPROVAL_PENDING
  const approver = await authority.key(['approvals:read', 'approvals:write']);
  const resolved = await post(authority, `/v1/approvals/${holdId}/resolve`, { decision: 'approve' }, approver);
  if (resolved.statusCode !== 200) throw new Error(resolved.body);
  await recent(wire(50_000, [holdId]), 'allow'); // PAYMENT_APPROVED

  const escalated = await evaluate(authority, wire(2_000_000));
  expect(escalated, 'escalate');
  acme += 1;
  const escalationId = escalated.escalation_id as string;
  for (const user of ['treasurer-1', 'treasurer-2']) {
    const token = await authority.idp.sign({ sub: user, org_id: authority.acme.id, role: 'approver' });
    const voted = await post(authority, `/v1/escalations/${escalationId}/respond`, { decision: 'approve' }, token);
    if (voted.statusCode !== 200) throw new Error(voted.body);
  }
  await recent(wire(2_000_000, [escalationId]), 'allow'); // the escalation's kind keeps the escalate rule quiet
  await recent(wire(2_000_000, [escalationId]), 'deny'); // APPROVAL_ALREADY_USED

  await recent(tool('send_email'), 'allow');
  await recent(tool('search_kb'), 'allow');
  await recent({ action_type: 'demo.echo', actor_id: 'stranger', context: {} }, 'deny');
  expect(await evaluate(authority, wire(5_000), authority.globexAdmin), 'allow');
  return { recent: { acme, globex: 1 } };
}

async function rowCounts(db: Db): Promise<Record<string, number>> {
  const counts: Record<string, number> = {};
  for (const table of ['audit_events', 'evaluations', 'permits', 'approval_requests', 'escalations', 'approval_uses', 'webhook_deliveries']) {
    const [row] = await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${table}`);
    counts[table] = row?.n ?? -1;
  }
  return counts;
}

const transitions = (report: ReplayReport) => report.groups.map((g) => `${g.action_class}: ${g.from}→${g.to} ${g.count}`);

for (const backend of dbBackends()) {
  t.test(`replay re-decides recorded evaluations on ${backend.name}`, async (t) => {
    const opened = await backend.open();
    const clock = new ManualClock(Date.now());
    const authority = await authorityOn(opened, clock);
    t.teardown(async () => {
      await authority.close();
      await opened.cleanup();
    });
    const { recent } = await record(authority);
    const orgs = [
      { id: authority.acme.id, name: authority.acme.name },
      { id: authority.globex.id, name: authority.globex.name },
    ];
    const now = new Date(clock.now());
    const day = parseSince('24h', now) as Date;
    const before = await rowCounts(opened.db);

    const same = await replayEvaluations(opened.db, compiled(EXAMPLE), { since: day, orgs, limit: 10_000, pageSize: 3 });
    t.equal(same.totals.replayed, recent.acme + recent.globex, 'every evaluation of the last day is replayed, across pages');
    t.same(same.changes, [], 'under the policy that decided them, no decision changes (approvals and votes included)');
    t.equal(same.totals.reasons_changed, 0, 'nor any reason');

    const candidate = compiled(CANDIDATE);
    const report = await replayEvaluations(opened.db, candidate, { since: day, orgs, limit: 10_000, pageSize: 4 });
    t.same(transitions(report), ['agent.tool: allow→deny 1', 'payments: allow→hold 2'], 'exactly the changed decisions, by action class');
    t.equal(report.totals.changed, 3);
    t.equal(report.totals.unchanged, report.totals.replayed - 3);
    t.notOk(report.truncated);
    const email = report.changes.find((c) => c.action_class === 'agent.tool');
    t.match(email, {
      org: authority.acme.name,
      action_type: 'agent.tool.invoke',
      actor_id: 'support-agent',
      from: { decision: 'allow', reasons: ['ALLOWLISTED_TOOL'] },
      to: { decision: 'deny', reasons: ['DEFAULT_DENY'] },
    });
    t.match(email?.evaluation_id, /^[0-9a-f-]{36}$/);
    t.same(
      report.changes.filter((c) => c.action_class === 'payments').map((c) => [c.org, c.from.reasons, c.to.reasons]),
      [
        [authority.acme.name, ['AMOUNT_WITHIN_LIMIT'], ['AMOUNT_OVER_HOLD_THRESHOLD']],
        [authority.globex.name, ['AMOUNT_WITHIN_LIMIT'], ['AMOUNT_OVER_HOLD_THRESHOLD']],
      ],
    );

    const acmeOnly = await replayEvaluations(opened.db, candidate, { since: day, orgs: [orgs[0] as (typeof orgs)[number]], limit: 10_000 });
    t.same(transitions(acmeOnly), ['agent.tool: allow→deny 1', 'payments: allow→hold 1'], 'one organization only');

    const week = await replayEvaluations(opened.db, candidate, { since: parseSince('4d', now) as Date, orgs, limit: 10_000 });
    t.same(transitions(week), ['agent.tool: allow→deny 1', 'payments: allow→hold 3'], 'a longer --since takes in the older evaluation');

    const capped = await replayEvaluations(opened.db, candidate, { since: day, orgs, limit: 2, pageSize: 1 });
    t.equal(capped.totals.replayed, 2, '--limit caps the count');
    t.ok(capped.truncated, 'and says that more were left out');
    const exact = await replayEvaluations(opened.db, candidate, { since: day, orgs, limit: recent.acme + recent.globex });
    t.notOk(exact.truncated, 'a limit that fits exactly is not a truncation');

    t.same(await rowCounts(opened.db), before, 'replay wrote nothing: no audit event, no evaluation, nothing else');
  });
}

t.test('--since: durations and ISO instants', async (t) => {
  const now = new Date('2026-11-25T12:00:00Z');
  t.equal(parseSince('30m', now)?.toISOString(), '2026-11-25T11:30:00.000Z');
  t.equal(parseSince('24h', now)?.toISOString(), '2026-11-24T12:00:00.000Z');
  t.equal(parseSince('7d', now)?.toISOString(), '2026-11-18T12:00:00.000Z');
  t.equal(parseSince('2026-11-01T00:00:00Z', now)?.toISOString(), '2026-11-01T00:00:00.000Z');
  t.equal(parseSince('yesterday', now), null);
  t.equal(parseSince('24', now), null);
});

function capture(env: NodeJS.ProcessEnv): CliIo & { lines: string[] } {
  const lines: string[] = [];
  return { lines, out: (line) => lines.push(line), env };
}

/** The CLI end to end: `env` reaches the database the evaluations were recorded in. */
async function cliReplay(t: Test, authority: TestAuthority, env: NodeJS.ProcessEnv, closeFirst: () => Promise<void>): Promise<void> {
  await record(authority);
  const since = new Date(authority.clock.now() - DAY).toISOString();
  await closeFirst();
  const dir = tempDir('policy-replay-');
  const candidateFile = join(dir, 'candidate.yaml');
  writeFileSync(candidateFile, CANDIDATE);
  writeFileSync(join(dir, 'same.yaml'), EXAMPLE);

  const org = authority.acme.name;
  const text = capture(env);
  t.equal(await runPolicyCommand(['replay', '--policy', candidateFile, '--since', since, '--org', org], text), 1, 'decisions change: exit 1');
  const output = text.lines.join('\n');
  t.match(output, /2 changed/);
  t.match(output, /By action class:\n {2}agent\.tool: allow→deny 1\n {2}payments: allow→hold 1/);
  t.match(output, /allow \[AMOUNT_WITHIN_LIMIT\] → hold \[AMOUNT_OVER_HOLD_THRESHOLD\]/);

  const json = capture(env);
  t.equal(await runPolicyCommand(['replay', '--policy', candidateFile, '--since', since, '--org', org, '--format', 'json'], json), 1);
  const report = JSON.parse(json.lines.join('\n')) as ReplayReport;
  t.same(report.orgs, [org]);
  t.same(transitions(report), ['agent.tool: allow→deny 1', 'payments: allow→hold 1']);

  t.equal(await runPolicyCommand(['replay', '--policy', join(dir, 'same.yaml'), '--since', since, '--org', org], capture(env)), 0, 'no change: exit 0');

  const refused = async (args: string[], pattern: RegExp) => {
    const error = await runPolicyCommand(args, capture(env)).then(
      () => null,
      (e: unknown) => e as Error & { code?: string },
    );
    t.equal(error?.code, 'USAGE', args.join(' '));
    t.match(error?.message, pattern);
  };
  writeFileSync(join(dir, 'broken.yaml'), 'version: 1\naction_classes: [{ id: x }]\n');
  await refused(['replay', '--policy', join(dir, 'broken.yaml')], /does not compile/);
  await refused(['replay', '--policy', candidateFile, '--org', 'no-such-org'], /no organization "no-such-org"/);
  await refused(['replay', '--policy', candidateFile], new RegExp(`holds 2 organizations, each with its own policy: name the one the candidate is for with --org \\(.*${org}`));
  await refused(['replay', '--policy', candidateFile, '--since', 'last tuesday'], /--since must be/);
  await refused(['replay', '--policy', candidateFile, '--limit', '0'], /--limit must be/);
  await refused(['replay'], /--policy FILE/);
}

t.test('countersign policy replay on an embedded data directory', async (t) => {
  const dataDir = tempDir('policy-replay-data-');
  const db = await openDb({ dataDir });
  await migrate(db);
  const clock = new ManualClock(Date.now());
  let closed = false;
  const close = async () => {
    if (closed) return;
    closed = true;
    await authority.close();
    await db.close();
  };
  const authority = await authorityOn({ db, cleanup: async () => {} }, clock);
  t.teardown(close);
  // The embedded database is opened by one process at a time: the authority closes it first.
  await cliReplay(t, authority, { COUNTERSIGN_DATA_DIR: dataDir }, close);

  const missing = await runPolicyCommand(['replay', '--policy', join(dataDir, 'x.yaml')], capture({ COUNTERSIGN_DATA_DIR: join(dataDir, 'nothing') })).then(
    () => null,
    (e: unknown) => e as Error & { code?: string },
  );
  t.equal(missing?.code, 'USAGE', 'a missing candidate file is a usage error');
  t.match(missing?.message, /cannot read the policy/);
});

t.test('countersign policy replay without a database to read', async (t) => {
  const dir = tempDir('policy-replay-empty-');
  writeFileSync(join(dir, 'p.yaml'), EXAMPLE);
  const error = await runPolicyCommand(['replay', '--policy', join(dir, 'p.yaml')], capture({ COUNTERSIGN_DATA_DIR: join(dir, 'data') })).then(
    () => null,
    (e: unknown) => e as Error & { code?: string },
  );
  t.equal(error?.code, 'USAGE');
  t.match(error?.message, /no embedded database/, 'it says where it looked instead of creating an empty database');
});

const postgres = dbBackends().find((backend) => backend.name === 'postgres');
t.test('countersign policy replay on Postgres (DATABASE_URL)', { skip: postgres ? false : postgresSkipReason() }, async (t) => {
  const opened = await (postgres as NonNullable<typeof postgres>).open();
  const authority = await authorityOn(opened, new ManualClock(Date.now()));
  t.teardown(async () => {
    await authority.close();
    await opened.cleanup();
  });
  await cliReplay(t, authority, { DATABASE_URL: opened.url }, async () => {});
});
