/**
 * Bad input, generated: share 2 of the routes (bad-input-requests.ts has the generators and the list).
 *
 * @example
 *   npx tap test/property/bad-input-2.test.ts
 */
import { BAD_INPUT_SHARES, badBodies } from './bad-input.js';

badBodies(2, BAD_INPUT_SHARES);
