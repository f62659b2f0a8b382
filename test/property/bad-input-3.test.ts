/**
 * Bad input, generated: share 3 of the routes (bad-input-requests.ts has the generators and the list).
 *
 * @example
 *   npx tap test/property/bad-input-3.test.ts
 */
import { BAD_INPUT_SHARES, badBodies } from './bad-input.js';

badBodies(3, BAD_INPUT_SHARES);
