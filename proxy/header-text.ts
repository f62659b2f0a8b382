/**
 * One reading of a header value for every front door. node:http hands header values over as
 * latin1 strings, one character per byte; so does the ext_authz gRPC service for `header_map`
 * (raw bytes) and, converted here, for `headers` (already text). A header-bound fact is then read
 * from those bytes as UTF-8, on every transport alike, so `X-Actor-Id: démo-agent` binds the
 * actor `démo-agent` whichever way the request arrived.
 *
 * A value whose bytes are not UTF-8 has no text, and neither has one holding U+FFFD: that is what
 * a lenient decoder upstream (Envoy's `headers` map, decoded as protobuf text) makes of invalid
 * bytes, so it could stand for any of them. Either way the fact has no canonical form and the gate
 * refuses the request, never matching by accident.
 *
 * @example
 *   headerBytes('démo-agent');       // 'dÃ©mo-agent' (the UTF-8 bytes, as node:http would give them)
 *   headerText('dÃ©mo-agent');       // 'démo-agent'
 *   headerText('d\u00e9mo-agent');   // undefined: the single byte 0xE9 is not UTF-8
 */

/** Strict: invalid UTF-8 throws rather than turning into U+FFFD. Stateless, so one serves every call. */
const UTF8 = new TextDecoder('utf-8', { fatal: true });

const ASCII = /^[\x00-\x7f]*$/;

/** A header value given as text, in node:http's form: its UTF-8 bytes, one latin1 character each. */
export function headerBytes(text: string): string {
  return ASCII.test(text) ? text : Buffer.from(text, 'utf8').toString('latin1');
}

/** The text of a header value in node:http's form, read as UTF-8; undefined when it has none. */
export function headerText(value: string): string | undefined {
  if (ASCII.test(value)) return value;
  // A character above 0xFF cannot be one byte: the value did not come in node:http's form.
  if (/[^\x00-\xff]/.test(value)) return undefined;
  let text: string;
  try {
    text = UTF8.decode(Buffer.from(value, 'latin1'));
  } catch {
    return undefined;
  }
  return text.includes('\ufffd') ? undefined : text;
}
