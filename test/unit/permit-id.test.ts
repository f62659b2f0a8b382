/**
 * newPermitId draws its bytes from a 4 KiB pool (256 ids per refill): ids across refills must
 * still be well-formed, 128 bits each, and never repeat a slice of the pool.
 */
import t from 'tap';
import { isPermitId, newPermitId } from '../../shared/permits/claims.js';

t.test('ids across several refills of the pool: 22 base64url characters, 16 bytes, all distinct', async (t) => {
  const ids = Array.from({ length: 2_000 }, () => newPermitId());
  t.ok(ids.every(isPermitId), 'every id matches the permit id pattern');
  t.ok(ids.every((id) => Buffer.from(id, 'base64url').length === 16), 'every id is 16 bytes');
  t.equal(new Set(ids).size, ids.length, 'no id repeats');
});
