/**
 * verificationRecordFields: the proxy's records skip a schema parse on the hot path, so the
 * clamping it does instead must always give a record the drain's schema accepts.
 */
import t from 'tap';
import { VerificationRecord, verificationRecordFields } from '../../shared/wire/verification-records.js';

const record: VerificationRecord = {
  kind: 'permit.rejected',
  gate: 'proxy:echo',
  mode: 'enforce',
  at: '2026-11-22T10:00:00.000Z',
  request_id: 'req-1',
  permit_id: 'p1',
  action_type: 'demo.echo',
  actor_id: 'demo-agent',
  code: 'PERMIT_EXPIRED',
  reason: 'the permit has expired',
  upstream_status: '',
  duration_ms: '',
};

t.test('a record within its caps is passed on unchanged', async (t) => {
  t.same(verificationRecordFields(record), record);
});

t.test('every text field over its cap is clamped, and the result parses', async (t) => {
  const long = (n: number) => 'x'.repeat(n + 50);
  const fields = verificationRecordFields({
    ...record,
    gate: long(200),
    request_id: long(200),
    permit_id: long(64),
    action_type: long(256),
    actor_id: long(256),
    code: long(64),
    reason: long(500),
    upstream_status: '12345',
    duration_ms: long(20),
    tool: long(128),
  });
  const parsed = VerificationRecord.safeParse(fields);
  t.ok(parsed.success, parsed.success ? 'parses' : JSON.stringify(parsed.error.issues));
  t.equal(fields.reason?.length, 500);
  t.equal(fields.upstream_status, '123');
  t.equal(fields.tool?.length, 128, 'the optional tool too');
});
