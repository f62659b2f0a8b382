/**
 * The store's Lua scripts (redis-scripts.ts) as client commands, each defined with a fixed number
 * of keys. That matters in a Redis Cluster: the client groups commands sent in the same tick into
 * one pipeline per node, finding the node by a command's first key. A script called with its key
 * count as first argument would be grouped by the slot of that number, with scripts for keys on
 * other primaries, and the client then refuses such a pipeline whole: consumes failed, and undos
 * owed after a failover were refused at every retry. So the consume and the undo each come in two
 * commands, with and without the record stream.
 *
 * The client sends a script's text (EVAL) the first time it uses a connection and its digest
 * (EVALSHA) after; a server that does not know the digest (a replica just promoted, a script
 * cache flushed) answers NOSCRIPT, and nothing ran. The client's own retry does not apply to
 * commands it pipelines, so each call here is sent once more on NOSCRIPT, as text this time.
 *
 * @example
 *   defineScriptCommands(client);
 *   const [code, recordId] = await runConsumeScript(client, [marker, revoked, epoch, stream], args);
 *   await runReleaseScript(client, { keys: [marker, stream], nonce });
 */
import type { PendingRelease } from './redis-releases.js';
import { ENSURE_EPOCH_SCRIPT, CONSUME_SCRIPT, RELEASE_SCRIPT, TAKE_TOKEN_SCRIPT } from './redis-scripts.js';
import type { RedisClient } from './redis-topology.js';

export interface ScriptedRedis {
  /** KEYS: marker, revocation, epoch, record stream. */
  countersignConsumeRecorded(...keysAndArgs: string[]): Promise<[number, string]>;
  /** KEYS: marker, revocation, epoch. */
  countersignConsumeUnrecorded(...keysAndArgs: string[]): Promise<[number, string]>;
  /** KEYS: marker, record stream. */
  countersignReleaseRecorded(...keysAndArgs: string[]): Promise<number>;
  /** KEYS: marker. */
  countersignReleaseUnrecorded(...keysAndArgs: string[]): Promise<number>;
  countersignEnsureEpoch(key: string): Promise<[string, number]>;
  countersignTakeToken(key: string, ...args: string[]): Promise<[number, string, string]>;
}

export function defineScriptCommands(client: RedisClient): void {
  client.defineCommand('countersignConsumeRecorded', { numberOfKeys: 4, lua: CONSUME_SCRIPT });
  client.defineCommand('countersignConsumeUnrecorded', { numberOfKeys: 3, lua: CONSUME_SCRIPT });
  client.defineCommand('countersignReleaseRecorded', { numberOfKeys: 2, lua: RELEASE_SCRIPT });
  client.defineCommand('countersignReleaseUnrecorded', { numberOfKeys: 1, lua: RELEASE_SCRIPT });
  client.defineCommand('countersignEnsureEpoch', { numberOfKeys: 1, lua: ENSURE_EPOCH_SCRIPT });
  client.defineCommand('countersignTakeToken', { numberOfKeys: 1, lua: TAKE_TOKEN_SCRIPT });
}

/** The consume script; `keys` are the marker, revocation and epoch keys, then the record stream if any. */
export function runConsumeScript(client: ScriptedRedis, keys: string[], args: string[]): Promise<[number, string]> {
  return loadedIfUnknown(() => (keys.length > 3 ? client.countersignConsumeRecorded(...keys, ...args) : client.countersignConsumeUnrecorded(...keys, ...args)));
}

/** The undo of one consume: its marker, then its record stream if it appended a record. */
export function runReleaseScript(client: ScriptedRedis, release: PendingRelease): Promise<number> {
  return loadedIfUnknown(() =>
    release.keys.length > 1
      ? client.countersignReleaseRecorded(...release.keys, release.nonce)
      : client.countersignReleaseUnrecorded(...release.keys, release.nonce),
  );
}

export function runEnsureEpochScript(client: ScriptedRedis, key: string): Promise<[string, number]> {
  return loadedIfUnknown(() => client.countersignEnsureEpoch(key));
}

export function runTakeTokenScript(client: ScriptedRedis, key: string, args: string[]): Promise<[number, string, string]> {
  return loadedIfUnknown(() => client.countersignTakeToken(key, ...args));
}

/** Sends a script command once more when the server did not know the script (it did not run). */
async function loadedIfUnknown<T>(send: () => Promise<T>): Promise<T> {
  try {
    return await send();
  } catch (error) {
    if (!(error instanceof Error) || !error.message.startsWith('NOSCRIPT')) throw error;
    return send();
  }
}
