// The engine for benchmarks: the test harness's private engine (free ports,
// temporary database), plus the gateway and API helpers the scenarios use.
//
// `startBenchEngine()` starts it with three changes from the test harness's
// settings, which are tuned for quick tests with a few actors:
// - envoys are declared lost after 5 min without a ping (harness: 7 s;
//   engine default: 15 s), ineligible for new actors after 30 s. Every live
//   actor's workflow re-checks its envoy's liveness once per that threshold
//   (a workflow loop iteration). At 7 s, with a few hundred live actors on
//   one envoy, these checks and actor creation conflict in the engine's
//   database: creating an actor cost the engine 30 ms of CPU with 100 live
//   actors and 680 ms with 400, some getOrCreate calls timed out after 15 s,
//   and the idle engine used half a core. With 60 s: 23-38 ms per actor up
//   to 500 actors, but with 1000 live actors the idle engine still used 78%
//   of a core; with 5 min, 4%. (Envoys also stop all their actors when the
//   engine has not pinged them for that long, which an overloaded engine
//   made rivetkit-native's envoy do.) Nothing here needs lost envoys noticed;
// - rescheduling actors backs off (first retry after 100 ms as in the
//   harness, then doubling up to 2^12 times, i.e. to about 7 min; retry
//   count kept for 10 min as by default), instead of the harness's 100 ms
//   with no backoff, under which every actor left behind by a stopped host
//   is retried about five times a second, forever: with 50 such actors the
//   engine burned 1.5 cores for as long as we watched. (Capped at 2^8,
//   25.6 s, the 200 actors the two SIGINT measurements leave behind still
//   kept the engine at about half a core through the RSS measurements.)
// - RUST_BACKTRACE=0 (this machine sets 1): the engine captures a backtrace
//   for every failed request otherwise.

import { processCpuMs } from "./proc.mjs";
import { ADMIN_TOKEN, NAMESPACE, startEngine } from "../../__test__/helpers/engine.mjs";

export {
	getOrCreateActor,
	gatewayFetch,
	startEngine,
	upsertRunnerConfig,
} from "../../__test__/helpers/engine.mjs";

/** Environment of the engine in benchmarks (see above). */
export const BENCH_ENGINE_ENV = {
	RUST_BACKTRACE: "0",
	RIVET__PEGBOARD__ENVOY_LOST_THRESHOLD: "300000",
	RIVET__PEGBOARD__ENVOY_ELIGIBLE_THRESHOLD: "30000",
	RIVET__PEGBOARD__RETRY_RESET_DURATION: "600000",
	RIVET__PEGBOARD__RESCHEDULE_BACKOFF_MAX_EXPONENT: "12",
};

/** The bench's private engine. */
export function startBenchEngine() {
	return startEngine({ env: BENCH_ENGINE_ENV });
}

/** `GET` on the engine API (admin token, default namespace). */
async function apiGet(endpoint, path) {
	const url = new URL(path, endpoint);
	if (!url.searchParams.has("namespace")) url.searchParams.set("namespace", NAMESPACE);
	const res = await fetch(url, {
		headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
		signal: AbortSignal.timeout(30_000),
	});
	if (!res.ok) throw new Error(`GET ${url.pathname} -> ${res.status}: ${await res.text()}`);
	return res.json();
}

/** The envoys registered with the engine (`pool_name`, `stop_ts`, ...). */
export async function listEnvoys(endpoint) {
	return (await apiGet(endpoint, "/envoys")).envoys ?? [];
}

/**
 * Waits until the engine (pid `pid`) used less than `maxShare` of a core
 * over `windowMs`, at most `timeoutMs`. Resolves to the share last seen.
 */
export async function engineSettled(pid, { maxShare = 0.1, windowMs = 1_000, timeoutMs = 15_000 } = {}) {
	const deadline = performance.now() + timeoutMs;
	let share = Number.NaN;
	while (performance.now() < deadline) {
		const before = processCpuMs(pid);
		await new Promise((r) => setTimeout(r, windowMs));
		const after = processCpuMs(pid);
		if (before === null || after === null) return Number.NaN;
		share = (after - before) / windowMs;
		if (share < maxShare) break;
	}
	return share;
}
