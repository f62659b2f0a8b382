/**
 * Load on the replay store as gates make it, for fault tests that count what survived: several
 * gates (RedisStores) consume fresh permits in two-way races, replay permits already used, and
 * send twenty-way bursts of one permit, each attempt with its own record. Afterwards `audit`
 * counts, on whatever server is the primary now, permits used twice, used permits whose marker
 * is gone (a replay would be accepted), used permits without their record, and records of
 * attempts that were refused (false verifications).
 *
 * @example
 *   const load = startConsumeLoad([gateA, gateB], { org, epoch });
 *   await load.untilConsumed(200);
 *   // … the fault …
 *   await load.stop();
 *   t.same(await load.audit(checker), { usedTwice: 0, replayable: 0, recordsLost: 0, falseVerifications: 0 });
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { permitStoreKey, replayEpochKey, verificationStream } from '../../shared/permits/store-keys.js';
import type { RedisStore } from '../../shared/store/redis.js';

export interface ConsumeLoadOptions {
  /** Organizations the permits belong to (one stream and epoch each), used in turn. */
  orgs: { id: string; epoch: number }[];
  /** Concurrent loops (default 8). */
  workers?: number;
  ttlMs?: number;
}

export interface ConsumeAudit {
  /** Permits consumed by more than one attempt: an effect that ran twice. */
  usedTwice: number;
  /** Permits consumed once whose marker is gone: a replay now would be accepted. */
  replayable: number;
  /** Consumed attempts whose `permit.verified` record is not in the stream. */
  recordsLost: number;
  /** Records of attempts that were answered with an error or a refusal. */
  falseVerifications: number;
}

export interface ConsumeLoad {
  /** Consumes that succeeded so far. */
  readonly consumed: number;
  /** Attempts that failed (the gate would answer 503) so far. */
  readonly failed: number;
  /** Resolves once `count` more consumes have succeeded, of `orgId`'s permits if given (rejects after `timeoutMs`). */
  untilConsumed(count: number, options?: { timeoutMs?: number; orgId?: string }): Promise<void>;
  stop(): Promise<void>;
  /** Counts, through `checker` (a store on the current primary), what the guarantees forbid. */
  audit(checker: RedisStore): Promise<ConsumeAudit>;
}

interface Permit {
  org: { id: string; epoch: number };
  jti: string;
}

export function startConsumeLoad(gates: RedisStore[], options: ConsumeLoadOptions): ConsumeLoad {
  const ttlMs = options.ttlMs ?? 120_000;
  const uses = new Map<string, { permit: Permit; count: number }>();
  const consumedAttempts = new Set<string>();
  const failedAttempts = new Set<string>();
  const counts = { consumed: 0, failed: 0 };
  const consumedByOrg = new Map<string, number>();
  let next = 0;
  let attemptNo = 0;
  let stopped = false;

  const attempt = async (gate: RedisStore, permit: Permit) => {
    const id = `a${attemptNo++}`;
    try {
      const result = await gate.consumePermit(
        permitStoreKey(permit.org.id, permit.jti),
        ttlMs,
        { stream: verificationStream(permit.org.id), fields: { permit_id: permit.jti, attempt: id } },
        { fence: { epochKey: replayEpochKey(permit.org.id), issuedAtMs: permit.org.epoch } },
      );
      if (result === 'consumed') {
        const entry = uses.get(permit.jti) ?? { permit, count: 0 };
        entry.count++;
        uses.set(permit.jti, entry);
        consumedAttempts.add(id);
        counts.consumed++;
        consumedByOrg.set(permit.org.id, (consumedByOrg.get(permit.org.id) ?? 0) + 1);
      } else {
        failedAttempts.add(id);
      }
    } catch {
      failedAttempts.add(id);
      counts.failed++;
    }
  };
  const gate = (i: number) => gates[i % gates.length]!;

  const workers = Array.from({ length: options.workers ?? 8 }, async (_, w) => {
    while (!stopped) {
      const n = next++;
      const org = options.orgs[n % options.orgs.length]!;
      const permit = { org, jti: `p${String(n).padStart(21, '0')}` };
      const tries: Promise<void>[] = [];
      // A fresh permit raced by two gates; every 25th one a burst of twenty.
      const racers = n % 25 === 0 ? 20 : 2;
      for (let i = 0; i < racers; i++) tries.push(attempt(gate(w + i), permit));
      // Every fifth round, a replay of a permit used before.
      if (n % 5 === 0 && uses.size > 0) {
        const earlier = [...uses.values()][n % uses.size]!;
        tries.push(attempt(gate(w + 1), earlier.permit));
      }
      await Promise.all(tries);
      // Leaves the event loop some air between rounds, so timers (and the fault) run on time.
      await sleep(1);
    }
  });

  return {
    get consumed() {
      return counts.consumed;
    },
    get failed() {
      return counts.failed;
    },
    async untilConsumed(count, { timeoutMs = 60_000, orgId } = {}) {
      const now = () => (orgId === undefined ? counts.consumed : consumedByOrg.get(orgId) ?? 0);
      const target = now() + count;
      const deadline = Date.now() + timeoutMs;
      while (now() < target) {
        if (Date.now() > deadline) throw new Error(`only ${now() - (target - count)} of ${count} consumes succeeded within ${timeoutMs} ms`);
        await sleep(10);
      }
    },
    async stop() {
      stopped = true;
      await Promise.all(workers);
      // Undos owed by the gates are sent before anything is counted.
      const deadline = Date.now() + 30_000;
      while (gates.some((g) => g.pendingReleases > 0) && Date.now() < deadline) await sleep(50);
    },
    async audit(checker) {
      const audit: ConsumeAudit = { usedTwice: 0, replayable: 0, recordsLost: 0, falseVerifications: 0 };
      const recorded = new Set<string>();
      for (const org of options.orgs) {
        for (const record of await checker.readRecords(verificationStream(org.id), '0', 1_000_000)) recorded.add(record.fields['attempt']!);
      }
      for (const { permit, count } of uses.values()) {
        if (count > 1) audit.usedTwice++;
        // A replay through the checker: its own record carries no attempt id.
        const again = await checker.consumePermit(permitStoreKey(permit.org.id, permit.jti), ttlMs, undefined, {
          fence: { epochKey: replayEpochKey(permit.org.id), issuedAtMs: permit.org.epoch },
        });
        if (again === 'consumed') audit.replayable++;
      }
      for (const id of consumedAttempts) if (!recorded.has(id)) audit.recordsLost++;
      for (const id of failedAttempts) if (recorded.has(id)) audit.falseVerifications++;
      return audit;
    },
  };
}
