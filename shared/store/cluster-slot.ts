/**
 * The Redis Cluster slot of a key: CRC16 (XMODEM) of its hash tag (the first non-empty `{…}`),
 * or of the whole key, modulo 16384. The store needs it to know which primary holds a key, so
 * that a write is acknowledged by that primary's own replicas.
 *
 * @example
 *   clusterSlotOf('countersign:once:permit:{org_1}:abc') === clusterSlotOf('{org_1}'); // true: same tag
 */
export function clusterSlotOf(key: string): number {
  const open = key.indexOf('{');
  let hashed = key;
  if (open !== -1) {
    const close = key.indexOf('}', open + 1);
    if (close > open + 1) hashed = key.slice(open + 1, close);
  }
  let crc = 0;
  for (const byte of Buffer.from(hashed)) {
    crc ^= byte << 8;
    for (let bit = 0; bit < 8; bit++) crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
  }
  return crc % 16384;
}
