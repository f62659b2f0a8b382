/**
 * Small pieces the policies page's sections share: a label beside its value (the inbox's `.facts`
 * look), a scrollable box for code that scrolls sideways inside itself (never the page) and can
 * be reached with the keyboard, and the words for a failure.
 */
import type { ComponentChildren } from 'preact';
import { ApiError } from '../api';

export function messageOf(error: unknown): string {
  return error instanceof ApiError ? error.message : 'Something went wrong in the console. Reload the page to try again.';
}

export function Row({ label, children }: { label: string; children: ComponentChildren }) {
  return (
    <div class="row">
      <dt>{label}</dt>
      <dd>{children}</dd>
    </div>
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

/** Says which permission the session lacks, instead of a section it could not use. */
export function MissingPermission({ what, needs, testId }: { what: string; needs: ComponentChildren; testId: string }) {
  return (
    <p class="notice" data-testid={testId}>
      {what} needs the permission {needs}, which your session does not have. Ask an administrator if you need it.
    </p>
  );
}
