/**
 * The one lone-surrogate check (shared/unicode.ts) that canonical JSON, the binding, the input
 * bounds and the record argument share: a pair is well-formed, either half alone is not.
 */
import t from 'tap';
import { hasLoneSurrogate, withoutLoneSurrogates } from '../../shared/unicode.js';

t.test('hasLoneSurrogate: true only for a half without its other half', async (t) => {
  for (const text of ['', 'plain', 'Zürich €', '\ud83d\ude00', 'a\ud800\udc00b']) t.notOk(hasLoneSurrogate(text), JSON.stringify(text));
  for (const text of ['\ud800', '\udc00', 'x\ud83d', '\ude00x', '\udc00\ud800', '\ud83d\ude00\ud83d']) t.ok(hasLoneSurrogate(text), JSON.stringify(text));
});

t.test('withoutLoneSurrogates: each lone half becomes U+FFFD, pairs stay, as a UTF-8 encoder writes it', async (t) => {
  for (const text of ['x\ud800y', '\udc00\ud800', '\ud83d\ude00\ud83d', 'plain']) {
    t.equal(withoutLoneSurrogates(text), Buffer.from(text, 'utf8').toString('utf8'), JSON.stringify(text));
  }
});
