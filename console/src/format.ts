/**
 * How the console words times, amounts, statuses and facts. Kept apart from the components so
 * every page says the same thing the same way, and words, not colours, carry each status.
 */

/** "4 min left", "2 h 5 min left", "expired"; rounded down, since a deadline is a deadline. */
export function timeLeft(deadline: string, nowMs: number): string {
  const ms = Date.parse(deadline) - nowMs;
  if (!Number.isFinite(ms)) return 'unknown';
  if (ms <= 0) return 'expired';
  const seconds = Math.floor(ms / 1000);
  if (seconds < 60) return `${seconds} s left`;
  const minutes = Math.floor(seconds / 60);
  if (minutes < 60) return `${minutes} min left`;
  const hours = Math.floor(minutes / 60);
  if (hours < 48) return minutes % 60 === 0 ? `${hours} h left` : `${hours} h ${minutes % 60} min left`;
  const days = Math.floor(hours / 24);
  return hours % 24 === 0 ? `${days} days left` : `${days} days ${hours % 24} h left`;
}

const dateTime = new Intl.DateTimeFormat(undefined, { dateStyle: 'medium', timeStyle: 'short' });
const clock = new Intl.DateTimeFormat(undefined, { timeStyle: 'medium' });
const usd = new Intl.NumberFormat('en-US', { style: 'currency', currency: 'USD' });

export function formatDateTime(iso: string): string {
  const ms = Date.parse(iso);
  return Number.isFinite(ms) ? dateTime.format(ms) : iso;
}

export function formatClock(ms: number): string {
  return clock.format(ms);
}

/** Risk scores are 0 to 1 (the policy engine clamps them); two decimals is what a person reads. */
export function formatRisk(score: number | null): string {
  return score === null ? 'not given' : score.toFixed(2);
}

const STATUS_LABELS: Record<string, string> = {
  pending: 'Pending',
  escalated: 'Escalated to the next tier',
  approved: 'Approved',
  rejected: 'Rejected',
  expired: 'Expired',
  timed_out: 'Timed out',
  auto_approved: 'Approved automatically (low risk)',
};

export function statusLabel(status: string): string {
  return STATUS_LABELS[status] ?? status;
}

const TIER_LABELS: Record<string, string> = {
  single_approver: 'one approver',
  simple_majority: 'simple majority',
  two_thirds: 'two thirds',
  unanimous: 'unanimous',
};

export function quorumLabel(tier: string): string {
  return TIER_LABELS[tier] ?? tier;
}

const FACT_LABELS: Record<string, string> = {
  environment: 'Environment',
  target: 'Target',
  amount_usd: 'Amount',
  account_code: 'Account code',
};

export function factLabel(name: string): string {
  return FACT_LABELS[name] ?? name;
}

/** A bound fact as text: the standard ones in their usual form, any other as its JSON. */
export function factValue(name: string, value: unknown): string {
  if (name === 'amount_usd' && typeof value === 'number') return usd.format(value);
  if (name === 'target' && typeof value === 'object' && value !== null) {
    const { type, id } = value as { type?: unknown; id?: unknown };
    if (typeof type === 'string' && typeof id === 'string') return `${type}: ${id}`;
  }
  if (typeof value === 'string') return value;
  try {
    return JSON.stringify(value) ?? String(value);
  } catch {
    return String(value);
  }
}
