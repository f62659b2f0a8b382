/**
 * Shutdown for a process that acquires things one after another: each is released in reverse
 * order of acquisition (listeners first, so in-flight requests drain; storage last), at most once
 * however often `closeAll` is called, and a failing step is reported without stopping the others.
 *
 * @example
 *   const resources = new Resources((error) => logger.error({ err: error }, 'error while closing'));
 *   const db = await openDb(…); resources.add(() => db.close());
 *   …
 *   await resources.closeAll();
 */
export class Resources {
  private readonly steps: Array<() => Promise<void>> = [];
  private closing: Promise<void> | undefined;

  constructor(private readonly onError: (error: unknown) => void) {}

  add(release: () => Promise<void>): void {
    this.steps.push(release);
  }

  closeAll(): Promise<void> {
    this.closing ??= (async () => {
      for (const step of [...this.steps].reverse()) await step().catch(this.onError);
    })();
    return this.closing;
  }
}
