/**
 * An identity as the console shows it everywhere: its id, then what it is when known (an API
 * key's name, and whom it acts for when that is not itself), and "(you)" for the person signed in.
 *
 * @example
 *   <Identity identity="api_key:3f0c…" session={session} />
 *   // api_key:3f0c… (the key “ci job” of user:ada)
 */
import type { SignedInSession } from '../api';
import { useIdentity } from '../identities';

/** Without `session`, nobody is "you" (a record shown outside anyone's own items). */
export function Identity({ identity, session }: { identity: string; session?: Pick<SignedInSession, 'identity'> }) {
  const described = useIdentity(identity);
  const owner = described !== null && described.owner !== identity ? ` of ${described.owner}` : '';
  return (
    <span class="identity" data-identity={identity}>
      <code>{identity}</code>
      {described !== null && ` (the key “${described.name}”${owner}${described.revoked ? ', revoked' : ''})`}
      {identity === session?.identity && ' (you)'}
    </span>
  );
}
