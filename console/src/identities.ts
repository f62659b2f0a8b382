/**
 * Names for the identities the pages show. Records name people and keys by identity
 * (`api_key:<uuid>`, `user:<sub>`); for API keys the console asks its own endpoint
 * (`GET /console/api/identities`) for the key's name and owner, so a person reads "the key “ci
 * job”" instead of a uuid. Asked once per page load and identity, many at a time: every
 * component that shows an identity in one render is answered by one request.
 *
 * @example
 *   const described = useIdentity('api_key:3f0c…'); // null until known (and for users)
 *   described?.name; // 'ci job'
 */
import { useEffect, useState } from 'preact/hooks';
import type { ConsoleIdentitiesResponse, ConsoleIdentity } from '../../shared/wire/console.js';
import { json } from './api';

export type { ConsoleIdentity };

const MAX_PER_REQUEST = 50;
/** What is known: a description, or null for an identity the server described not (a user, a key of nobody here). */
const known = new Map<string, ConsoleIdentity | null>();
const wanted = new Set<string>();
const listeners = new Set<() => void>();
let scheduled = false;

const isKey = (identity: string): boolean => identity.startsWith('api_key:');

async function lookUp(): Promise<void> {
  scheduled = false;
  const batch = [...wanted].slice(0, MAX_PER_REQUEST);
  try {
    const { body } = await json<ConsoleIdentitiesResponse>(`/console/api/identities?ids=${encodeURIComponent(batch.join(','))}`);
    const found = new Map(body.identities.map((entry) => [entry.identity, entry]));
    for (const identity of batch) known.set(identity, found.get(identity) ?? null);
  } catch {
    // A name is a courtesy: on failure the page keeps showing the id, and does not ask again.
    for (const identity of batch) known.set(identity, null);
  }
  for (const identity of batch) wanted.delete(identity);
  for (const listener of listeners) listener();
  if (wanted.size > 0) schedule();
}

function schedule(): void {
  if (scheduled) return;
  scheduled = true;
  // After the current render: every identity it shows goes in the same request.
  setTimeout(() => void lookUp(), 0);
}

/** Tells the module what a page already knows (the keys page lists names), so it is not asked for. */
export function rememberIdentities(entries: readonly ConsoleIdentity[]): void {
  for (const entry of entries) known.set(entry.identity, entry);
}

/** The description of `identity` once known; null before, and for identities that have none. */
export function useIdentity(identity: string): ConsoleIdentity | null {
  const [, changed] = useState(0);
  useEffect(() => {
    if (!isKey(identity)) return undefined;
    const listener = (): void => changed((count) => count + 1);
    listeners.add(listener);
    if (!known.has(identity)) {
      wanted.add(identity);
      schedule();
    }
    return () => {
      listeners.delete(listener);
    };
  }, [identity]);
  return known.get(identity) ?? null;
}
