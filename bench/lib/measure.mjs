// One measured window: client latencies from a load run, plus the CPU the
// host (over IPC) and the engine (from /proc) used during it.

import { run } from "./load.mjs";
import { mainThreadCpuMs, processCpuMs } from "./proc.mjs";
import { summarize } from "./stats.mjs";

/**
 * Runs `op` under `load` ({total, inFlight, deadlineMs}) and returns a row:
 * `{ops, errors, firstError, p50, p90, p99, max, perSecond, hostCpuMsPerOp,
 * engineCpuMsPerOp, hostRssMb}`, plus the raw `latencies`, `hostCpuMs`,
 * `engineCpuMs` and `wallMs` (for [`merge`]).
 */
export async function measure({ host, enginePid, load }, op) {
	const hostBefore = await host.cpu();
	const jsBefore = mainThreadCpuMs(host.pid);
	const engineBefore = processCpuMs(enginePid);
	const result = await run(load, op);
	const hostAfter = await host.cpu();
	const jsAfter = mainThreadCpuMs(host.pid);
	const engineAfter = processCpuMs(enginePid);

	const ops = result.latencies.length;
	const hostCpuMs = hostAfter.userMs + hostAfter.systemMs - (hostBefore.userMs + hostBefore.systemMs);
	const engineCpuMs = engineBefore === null || engineAfter === null ? Number.NaN : engineAfter - engineBefore;
	const jsThreadCpuMs = jsBefore === null || jsAfter === null ? Number.NaN : jsAfter - jsBefore;
	return {
		ops,
		errors: result.errors.length,
		firstError: result.errors[0]?.message,
		...summarize(result.latencies),
		perSecond: (ops * 1000) / result.wallMs,
		hostCpuMsPerOp: hostCpuMs / (ops || 1),
		jsThreadCpuMsPerOp: jsThreadCpuMs / (ops || 1),
		engineCpuMsPerOp: engineCpuMs / (ops || 1),
		hostRssMb: hostAfter.rssBytes / (1024 * 1024),
		latencies: result.latencies,
		hostCpuMs,
		jsThreadCpuMs,
		engineCpuMs,
		wallMs: result.wallMs,
	};
}

/** Rows of [`measure`] taken in turns, as one row. */
export function merge(rows) {
	const latencies = rows.flatMap((r) => r.latencies);
	const ops = latencies.length;
	const hostCpuMs = rows.reduce((sum, r) => sum + r.hostCpuMs, 0);
	const engineCpuMs = rows.reduce((sum, r) => sum + r.engineCpuMs, 0);
	const jsThreadCpuMs = rows.reduce((sum, r) => sum + r.jsThreadCpuMs, 0);
	const wallMs = rows.reduce((sum, r) => sum + r.wallMs, 0);
	return {
		ops,
		errors: rows.reduce((sum, r) => sum + r.errors, 0),
		firstError: rows.find((r) => r.firstError)?.firstError,
		...summarize(latencies),
		perSecond: (ops * 1000) / (wallMs || 1),
		hostCpuMsPerOp: hostCpuMs / (ops || 1),
		jsThreadCpuMsPerOp: jsThreadCpuMs / (ops || 1),
		engineCpuMsPerOp: engineCpuMs / (ops || 1),
		hostRssMb: rows.at(-1)?.hostRssMb,
		latencies,
		hostCpuMs,
		jsThreadCpuMs,
		engineCpuMs,
		wallMs,
	};
}
