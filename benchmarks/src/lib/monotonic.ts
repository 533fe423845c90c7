/**
 * Milliseconds on the machine-wide monotonic clock (`process.hrtime`, CLOCK_MONOTONIC): comparable
 * between processes of one machine, so that a relay process and the producers' process can stamp
 * the two ends of an event's latency.
 * @module
 */
export const monotonicMs = (): number => Number(process.hrtime.bigint()) / 1e6
