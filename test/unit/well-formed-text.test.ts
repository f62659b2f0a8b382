/**
 * Lone UTF-16 surrogates have no UTF-8 and no canonical JSON form. Canonical JSON, the binding,
 * the input bounds and recordable text refuse them with the runtime's `String#isWellFormed`, and
 * the record argument replaces them with `String#toWellFormed`, as a UTF-8 encoder does. This pins
 * what those callers rely on: a pair is well-formed, either half alone is not.
 */
import t from 'tap';

t.test('isWellFormed: false only for a half without its other half', async (t) => {
  for (const text of ['', 'plain', 'Zürich €', '\ud83d\ude00', 'a\ud800\udc00b']) t.ok(text.isWellFormed(), JSON.stringify(text));
  for (const text of ['\ud800', '\udc00', 'x\ud83d', '\ude00x', '\udc00\ud800', '\ud83d\ude00\ud83d']) t.notOk(text.isWellFormed(), JSON.stringify(text));
});

t.test('toWellFormed: each lone half becomes U+FFFD, pairs stay, as a UTF-8 encoder writes it', async (t) => {
  for (const text of ['x\ud800y', '\udc00\ud800', '\ud83d\ude00\ud83d', 'plain']) {
    t.equal(text.toWellFormed(), Buffer.from(text, 'utf8').toString('utf8'), JSON.stringify(text));
  }
});
