/**
 * Bad input, generated: share 4 of the routes (bad-input-requests.ts has the generators and the list).
 *
 * @example
 *   npx tap test/property/bad-input-4.test.ts
 */
import { BAD_INPUT_SHARES, badBodies } from './bad-input.js';

badBodies(4, BAD_INPUT_SHARES);
