/**
 * Small pieces every console page uses: a label beside its value (the `.facts` look), an instant
 * to the second, a hash that breaks anywhere (it never widens a phone's page), a box for code that
 * scrolls sideways inside itself and can be reached with the keyboard, which permission is
 * missing, and the words for a failure.
 */
import type { ComponentChildren } from 'preact';
import { ApiError } from '../api';

export function messageOf(error: unknown): string {
  return error instanceof ApiError ? error.message : 'Something went wrong in the console. Reload the page to try again.';
}

export function Row({ label, children, testId }: { label: string; children: ComponentChildren; testId?: string }) {
  return (
    <div class="row">
      <dt>{label}</dt>
      <dd data-testid={testId}>{children}</dd>
    </div>
  );
}

const instant = new Intl.DateTimeFormat(undefined, { dateStyle: 'medium', timeStyle: 'medium' });

/** A moment to the second (a permit's story happens within seconds), with its ISO text for machines. */
export function When({ at }: { at: string }) {
  const ms = Date.parse(at);
  return <time dateTime={at}>{Number.isFinite(ms) ? instant.format(ms) : at}</time>;
}

/** A SHA-256 (or any long token) in monospace that wraps anywhere. */
export function Hash({ value, testId }: { value: string; testId?: string }) {
  return (
    <code class="hash" data-testid={testId}>
      {value}
    </code>
  );
}

/** A region named `label`, focusable so that keyboard users can scroll it too. */
export function CodeBox({ label, children, testId }: { label: string; children: ComponentChildren; testId?: string }) {
  return (
    <div class="code-box" role="region" aria-label={label} tabIndex={0} data-testid={testId}>
      {children}
    </div>
  );
}

/** Says which permission the session lacks, instead of something it could not use. */
export function MissingPermission({ what, needs, testId }: { what: string; needs: ComponentChildren; testId: string }) {
  return (
    <p class="notice" data-testid={testId}>
      {what} needs the permission {needs}, which your session does not have. Ask an administrator if you need it.
    </p>
  );
}

export const plural = (count: number, one: string, many: string): string => `${count} ${count === 1 ? one : many}`;
