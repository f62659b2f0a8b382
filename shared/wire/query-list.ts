/**
 * A list in a query string, however it is written: `name=a&name=b`, `name=a,b`, or both. Empty
 * items are dropped; each item is then checked by `item`, and there may be at most `max`.
 *
 * @example
 *   const Query = z.object({ expected: queryList(z.string().regex(/^[A-Z_]+$/), 50).optional() });
 *   Query.parse({ expected: 'A,B' }); // { expected: ['A', 'B'] }
 */
import { z } from 'zod';

export function queryList<Item extends z.ZodType>(item: Item, max: number): z.ZodType<Array<z.output<Item>>, string | string[]> {
  // The items' own input type is narrower than the strings the split yields; zod checks each.
  const list = z.array(item).max(max) as unknown as z.ZodType<Array<z.output<Item>>, string[]>;
  return z
    .union([z.string(), z.array(z.string())])
    .transform((value) =>
      [value]
        .flat()
        .flatMap((entry) => entry.split(','))
        .map((entry) => entry.trim())
        .filter((entry) => entry.length > 0),
    )
    .pipe(list);
}
