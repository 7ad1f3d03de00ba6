// Load generators: bounded in count, and in time by `deadlineMs`.

/**
 * Runs `op(i)` `total` times with at most `inFlight` at once. Returns
 * `{latencies (ms), errors, wallMs}`; stops starting new operations past
 * `deadlineMs` of wall time.
 */
export async function run({ total, inFlight = 1, deadlineMs = 30_000 }, op) {
	const latencies = [];
	const errors = [];
	let next = 0;
	const started = performance.now();
	const worker = async () => {
		while (next < total && performance.now() - started < deadlineMs) {
			const i = next++;
			const t0 = performance.now();
			try {
				await op(i);
				latencies.push(performance.now() - t0);
			} catch (err) {
				errors.push(err);
			}
		}
	};
	await Promise.all(Array.from({ length: Math.min(inFlight, total) }, worker));
	return { latencies, errors, wallMs: performance.now() - started };
}
