/** A clock tests move by hand: no sleeping, no timing assertions. */
import type { Clock } from '../../authority/time.js';

export class ManualClock implements Clock {
  constructor(private current = Date.parse('2026-11-21T12:00:00.000Z')) {}
  now(): number {
    return this.current;
  }
  advance(ms: number): void {
    this.current += ms;
  }
}
