/**
 * The chain's hashes are held to one rule, 64 lower-case hex digits, by CHECK constraints that use
 * no regular expression (migration 0014; the regex was about 7 % of Postgres's CPU per
 * evaluation), and the batch write uses cached generic plans. The rule must refuse everything the
 * regex refused: another length, upper case, any other character, a trailing newline.
 */
import t from 'tap';
import { GENESIS_HASH } from '../../authority/audit/types.js';
import { createOrganization } from '../../authority/orgs/organizations.js';
import { ManualClock } from '../helpers/clock.js';
import { dbBackends } from '../helpers/db.js';

const HEX = '0123456789abcdef'.repeat(4);
const REFUSED = {
  empty: '',
  '63 digits': HEX.slice(1),
  '65 digits': `${HEX}0`,
  'upper case': HEX.toUpperCase(),
  'a letter past f': `${HEX.slice(1)}g`,
  'a trailing newline': `${HEX.slice(1)}\n`,
  'a leading space': ` ${HEX.slice(1)}`,
  'a non-ASCII digit': `${HEX.slice(1)}٣`,
};

for (const backend of dbBackends()) {
  t.test(`the hash checks refuse what is not 64 lower-case hex digits on ${backend.name}`, async (t) => {
    const { db, cleanup } = await backend.open();
    t.teardown(cleanup);
    const org = (await createOrganization(db, { name: `checks-${Math.random().toString(36).slice(2, 8)}` }, new ManualClock())).id;
    await db.query('INSERT INTO audit_chain_heads (org_id, sequence, head_hash) VALUES ($1, 0, $2)', [org, GENESIS_HASH]);
    const insertEvent = (hash: string, previousHash: string) =>
      db.query(
        `INSERT INTO audit_events (id, org_id, sequence, type, payload, hash, previous_hash, occurred_at, created_at)
         VALUES (gen_random_uuid(), $1, 1, 'test', '{}', $2, $3, now(), now())`,
        [org, hash, previousHash],
      );

    for (const [what, value] of Object.entries(REFUSED)) {
      await t.rejects(
        db.query('UPDATE audit_chain_heads SET head_hash = $2 WHERE org_id = $1', [org, value]),
        /audit_chain_heads_head_hash_check/,
        `head_hash: ${what}`,
      );
      await t.rejects(insertEvent(value, HEX), /audit_events_hash_check/, `hash: ${what}`);
      await t.rejects(insertEvent(HEX, value), /audit_events_previous_hash_check/, `previous_hash: ${what}`);
    }
    await db.query('UPDATE audit_chain_heads SET head_hash = $2 WHERE org_id = $1', [org, HEX]);
    t.same(await db.query('SELECT head_hash FROM audit_chain_heads WHERE org_id = $1', [org]), [{ head_hash: HEX }], '64 lower-case hex digits pass');
  });

  t.test(`the batch write plans its statements once on ${backend.name}`, async (t) => {
    const { db, cleanup } = await backend.open();
    t.teardown(cleanup);
    const [fn] = await db.query<{ proconfig: string[] | null }>("SELECT proconfig FROM pg_proc WHERE proname = 'countersign_store_evaluations'");
    t.same(fn?.proconfig, ['plan_cache_mode=force_generic_plan']);
  });
}
