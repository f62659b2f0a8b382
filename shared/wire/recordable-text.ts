/**
 * Text that can be recorded: Postgres `text` and `jsonb` hold no NUL character, and an unpaired
 * UTF-16 surrogate (either half of a pair alone, or both in the wrong order) has no UTF-8 form.
 * Free text a caller sends (notes, reasons, metadata) is refused with a 400 at the edge instead of
 * failing as a 500 in the database.
 *
 * @example
 *   note: z.string().max(2000).refine(isRecordable, RECORDABLE_MESSAGE).optional()
 *   textProblem('a\u0000b'); // 'text must not contain NUL'
 */

export const RECORDABLE_MESSAGE = { message: 'must not contain NUL characters or unpaired surrogates' };

/** Why `text` cannot be recorded, or null when it can. */
export function textProblem(text: string): string | null {
  if (text.includes('\u0000')) return 'text must not contain NUL';
  if (!text.isWellFormed()) return 'text must be well-formed Unicode (no lone surrogates)';
  return null;
}

export const isRecordable = (text: string): boolean => textProblem(text) === null;
