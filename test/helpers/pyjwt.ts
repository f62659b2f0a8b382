/**
 * PyJWT as an independent verifier of permits: Debian's /usr/bin/python3 with python3-jwt and
 * python3-cryptography (CI installs them; the `python3` on a developer's PATH may be another
 * Python without them), running `jwt.decode` with its default options. One Python process serves
 * a whole test, so a permit is verified within milliseconds of being issued rather than after a
 * Python start. On a machine without them a test comments PYJWT_NOT_RUN_REASON and returns,
 * instead of a silent skip.
 *
 * @example
 *   if (!pyjwtAvailable()) { t.comment(`PyJWT test did not run: ${PYJWT_NOT_RUN_REASON}`); return; }
 *   const pyjwt = startPyjwt(t);
 *   const verdict = await pyjwt.decode({ token, jwk, audience: 'countersign:gate', issuer });
 *   // { ok: true, claims: { iat: 1795000000, … } } or { ok: false, error: 'ImmatureSignatureError: …' }
 */
import { spawn, spawnSync } from 'node:child_process';
import { createInterface } from 'node:readline';
import type { Test } from 'tap';

const PYTHON = process.env['PYJWT_PYTHON']?.trim() || '/usr/bin/python3';

/** Why PyJWT tests did not run; printed with a comment instead of a silent skip. */
export const PYJWT_NOT_RUN_REASON =
  `${PYTHON} cannot import jwt and cryptography: install the python3-jwt and python3-cryptography ` +
  'packages (CI does) or point PYJWT_PYTHON at a Python that has PyJWT with EdDSA support';

export function pyjwtAvailable(): boolean {
  return spawnSync(PYTHON, ['-c', 'import jwt, cryptography'], { stdio: 'ignore' }).status === 0;
}

/** One JSON request per line in, one JSON verdict per line out. */
const VERIFIER = `
import json, sys
import jwt
from jwt.algorithms import OKPAlgorithm

for line in sys.stdin:
    request = json.loads(line)
    try:
        key = OKPAlgorithm.from_jwk(json.dumps(request["jwk"]))
        claims = jwt.decode(request["token"], key, algorithms=["EdDSA"], audience=request["audience"], issuer=request["issuer"])
        verdict = {"ok": True, "claims": claims}
    except Exception as error:
        verdict = {"ok": False, "error": f"{type(error).__name__}: {error}"}
    print(json.dumps(verdict), flush=True)
`;

export type PyjwtVerdict = { ok: true; claims: Record<string, unknown> } | { ok: false; error: string };

export interface Pyjwt {
  /** `jwt.decode(token, key, algorithms=["EdDSA"], audience=…, issuer=…)`, default options otherwise. */
  decode(request: { token: string; jwk: Record<string, unknown>; audience: string; issuer: string }): Promise<PyjwtVerdict>;
}

/** Starts the Python verifier; it ends with `t`. */
export function startPyjwt(t: Test): Pyjwt {
  const child = spawn(PYTHON, ['-c', VERIFIER], { stdio: ['pipe', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
  const waiting: Array<{ resolve: (verdict: PyjwtVerdict) => void; reject: (error: Error) => void }> = [];
  createInterface({ input: child.stdout }).on('line', (line) => waiting.shift()?.resolve(JSON.parse(line) as PyjwtVerdict));
  child.on('exit', (code) => {
    for (const pending of waiting.splice(0)) pending.reject(new Error(`the PyJWT verifier exited (${code}): ${stderr.slice(-2000)}`));
  });
  t.teardown(() => {
    child.stdin.end();
  });
  return {
    decode: (request) =>
      new Promise((resolve, reject) => {
        waiting.push({ resolve, reject });
        child.stdin.write(`${JSON.stringify(request)}\n`);
      }),
  };
}
