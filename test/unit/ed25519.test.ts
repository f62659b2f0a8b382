/**
 * The two Ed25519 engines of permit verification (shared/permits/ed25519.ts): libsodium through
 * sodium-native, and node:crypto, the fallback where the addon cannot load. Both must accept and
 * refuse exactly the same signatures of our signers.
 *
 * @example
 *   npm test -- test/unit/ed25519.test.ts
 */
import { generateKeyPairSync, sign } from 'node:crypto';
import fc from 'fast-check';
import t from 'tap';
import { chooseEd25519, NODE_ED25519, sodiumEd25519, type Ed25519 } from '../../shared/permits/ed25519.js';
import { POOL_WHEN_IN_FLIGHT, signatureRunsOnPool } from '../../shared/permits/verify.js';

const sodium = sodiumEd25519();

t.test('sodium-native loads here (npm ci installs the optional dependency, with its prebuilt binary)', async (t) => {
  t.not(sodium, null);
  t.equal(sodium?.engine, 'sodium-native');
});

const engines: Ed25519[] = [NODE_ED25519, ...(sodium ? [sodium] : [])];
const keys = [generateKeyPairSync('ed25519'), generateKeyPairSync('ed25519')];

t.test('both engines accept a valid signature and refuse every altered one', async (t) => {
  let runs = 0;
  fc.assert(
    fc.property(fc.uint8Array({ maxLength: 1024 }), fc.nat(), fc.nat(), (message, bitOfSignature, bitOfMessage) => {
      runs += 1;
      const data = Buffer.from(message);
      const [own, other] = keys as [(typeof keys)[0], (typeof keys)[0]];
      const signature = sign(null, data, own.privateKey);
      const flippedSignature = Buffer.from(signature);
      flippedSignature[(bitOfSignature >> 3) % 64]! ^= 1 << (bitOfSignature & 7);
      // One bit of the message flipped; an empty message gets a byte instead.
      const alteredData = data.length > 0 ? Buffer.from(data) : Buffer.from([1]);
      if (data.length > 0) alteredData[(bitOfMessage >> 3) % data.length]! ^= 1 << (bitOfMessage & 7);
      for (const engine of engines) {
        if (!engine.verify(data, own.publicKey, signature)) throw new Error(`${engine.engine} refused a valid signature`);
        if (engine.verify(data, other.publicKey, signature)) throw new Error(`${engine.engine} accepted another key's signature`);
        if (engine.verify(data, own.publicKey, flippedSignature)) throw new Error(`${engine.engine} accepted an altered signature`);
        if (engine.verify(alteredData, own.publicKey, signature)) throw new Error(`${engine.engine} accepted an altered message`);
      }
    }),
    { numRuns: 300 },
  );
  t.equal(runs, 300, `300 messages, ${engines.length} engines agree`);
});

t.test('both engines sign to the same bytes (Ed25519 is deterministic), and each verifies the other', async (t) => {
  let runs = 0;
  fc.assert(
    fc.property(fc.uint8Array({ maxLength: 1024 }), (message) => {
      runs += 1;
      const data = Buffer.from(message);
      const { privateKey, publicKey } = keys[0]!;
      const signatures = engines.map((engine) => engine.sign(data, privateKey));
      for (const signature of signatures) {
        if (!signature.equals(sign(null, data, privateKey))) throw new Error('an engine signed differently from node:crypto');
        for (const engine of engines) if (!engine.verify(data, publicKey, signature)) throw new Error(`${engine.engine} refused a signature`);
      }
    }),
    { numRuns: 200 },
  );
  t.equal(runs, 200);
  for (const engine of engines) t.throws(() => engine.sign(Buffer.from('x'), keys[0]!.publicKey), `${engine.engine}: a public key cannot sign`);
});

t.test('an RSA key verifies nothing with either engine', async (t) => {
  const rsa = generateKeyPairSync('rsa', { modulusLength: 1024 });
  const data = Buffer.from('x');
  const signature = sign(null, data, keys[0]!.privateKey);
  for (const engine of engines) {
    let accepted: boolean;
    try {
      accepted = engine.verify(data, rsa.publicKey, signature);
    } catch {
      accepted = false; // libsodium's way of saying no to a key it cannot use
    }
    t.equal(accepted, false, engine.engine);
  }
});

t.test('COUNTERSIGN_ED25519 chooses the engine: auto and sodium take libsodium, node keeps node:crypto', async (t) => {
  t.equal(chooseEd25519('node').engine, 'node:crypto');
  t.equal(chooseEd25519('auto').engine, 'sodium-native');
  t.equal(chooseEd25519('').engine, 'sodium-native', 'empty is auto');
  t.equal(chooseEd25519('sodium').engine, 'sodium-native');
  t.throws(() => chooseEd25519('openssl'), /expected auto, sodium or node/);
});

t.test("with libsodium, 'auto' keeps the check on the event loop; with node:crypto it moves to the pool under load", async (t) => {
  t.equal(signatureRunsOnPool('auto', POOL_WHEN_IN_FLIGHT, 'node:crypto'), true);
  t.equal(signatureRunsOnPool('auto', 1, 'node:crypto'), false);
  t.equal(signatureRunsOnPool('auto', POOL_WHEN_IN_FLIGHT * 10, 'sodium-native'), false);
  t.equal(signatureRunsOnPool('thread-pool', 1, 'sodium-native'), true, 'an explicit thread-pool still goes there');
});
