/**
 * Lone UTF-16 surrogates: half of a pair with no other half. They have no UTF-8 form and no
 * canonical JSON form, so every place that hashes, stores or sends text checks for them with this
 * one definition. With the `u` flag a well-formed pair is one code point, so `\p{Cs}` (the
 * surrogate category) matches only a lone half.
 *
 * @example
 *   hasLoneSurrogate('\ud83d\ude00'); // false: a pair (U+1F600)
 *   hasLoneSurrogate('x\ud800');      // true
 *   withoutLoneSurrogates('x\ud800'); // 'x\ufffd', what a UTF-8 encoder writes for it
 */

const LONE_SURROGATE = /\p{Cs}/u;
const LONE_SURROGATES = /\p{Cs}/gu;

export function hasLoneSurrogate(text: string): boolean {
  return LONE_SURROGATE.test(text);
}

/** `text` with each lone surrogate replaced by U+FFFD, as UTF-8 encoding (Buffer, ioredis) does. */
export function withoutLoneSurrogates(text: string): string {
  return text.replace(LONE_SURROGATES, '\uFFFD');
}
