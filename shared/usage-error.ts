/**
 * A mistake in how a `countersign` command was called. The dispatcher (bin/countersign.ts) prints
 * the message with that command's usage and exits 2. It lives apart from the commands so the
 * dispatcher can use it without loading any of them.
 *
 * @example
 *   throw new UsageError('--org is required');
 */
export class UsageError extends Error {
  readonly code = 'USAGE';
}
