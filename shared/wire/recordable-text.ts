/**
 * Text that can be recorded: Postgres `text` and `jsonb` hold no NUL character, and an unpaired
 * UTF-16 surrogate has no UTF-8 form. Free text a caller sends (notes, reasons, metadata) is
 * refused with a 400 at the edge instead of failing as a 500 in the database.
 *
 * @example
 *   note: z.string().max(2000).refine(isRecordable, RECORDABLE_MESSAGE).optional()
 */

export const RECORDABLE_MESSAGE = { message: 'must not contain NUL characters or unpaired surrogates' };

export const isRecordable = (text: string): boolean => !text.includes('\u0000') && text.isWellFormed();
