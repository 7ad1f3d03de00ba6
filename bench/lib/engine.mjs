// The engine for benchmarks: the test harness's private engine (free ports,
// temporary database), plus the gateway and API helpers the scenarios use.
//
// `startBenchEngine({ arch })`: engine 2.3.19 ("v2", the default: the
// RivetKit 2.3.19 parts, the scenarios and the scripts of bench/ written for
// it) or engine 3.0.0 ("v3": the RivetKit 3.0 side-by-side). The settings
// differ per arch (`BENCH_ENGINE_ENV`): engine 3.0 refuses to start with a
// setting it does not know, and knows none of 2.3.19's pegboard settings
// below but the lost threshold, which it names `node_lost_threshold`
// (its pegboard settings, from its own "unknown field" error: node_lost_threshold,
// node_ping_timeout, node_update_ping_interval, node_* queue capacities,
// gateway_* and actor_* start and retry settings, sqlite_*; no eligibility
// threshold and no reschedule backoff).
//
// On engine 2.3.19 three changes from the test harness's settings, which
// are tuned for quick tests with a few actors:
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
// On engine 3.0: nodes lost after 5 min too (harness: 7 s; engine default
// 40 s), for the same reason and so that both engines treat a busy host
// alike, and RUST_BACKTRACE=0.

import { processCpuMs } from "./proc.mjs";
import { listEnvoys as listHarnessEnvoys, startEngine } from "../../__test__/helpers/engine.mjs";

export {
	getOrCreateActor,
	gatewayFetch,
	startEngine,
	upsertRunnerConfig,
} from "../../__test__/helpers/engine.mjs";

/** Environment of the engine in benchmarks, per arch (see above). */
export const BENCH_ENGINE_ENV = Object.freeze({
	v2: {
		RUST_BACKTRACE: "0",
		RIVET__PEGBOARD__ENVOY_LOST_THRESHOLD: "300000",
		RIVET__PEGBOARD__ENVOY_ELIGIBLE_THRESHOLD: "30000",
		RIVET__PEGBOARD__RETRY_RESET_DURATION: "600000",
		RIVET__PEGBOARD__RESCHEDULE_BACKOFF_MAX_EXPONENT: "12",
	},
	v3: {
		RUST_BACKTRACE: "0",
		RIVET__PEGBOARD__NODE_LOST_THRESHOLD: "300000",
	},
});

/** The bench's private engine of `arch` ("v2" or "v3"). */
export function startBenchEngine({ arch = "v2" } = {}) {
	const env = BENCH_ENGINE_ENV[arch];
	if (!env) throw new Error(`unknown engine arch ${arch}`);
	return startEngine({ arch, env });
}

/**
 * The hosts connected to the engine at `target` (an endpoint or an engine
 * object), those of `pool` when given: engine 2.3.19's envoys (`GET
 * /envoys`: `pool_name`, `stop_ts`, ...), engine 3.0's nodes of the pool
 * (`GET /pools/{pool}/nodes`; without a pool, none).
 */
export async function listEnvoys(target, pool) {
	return listHarnessEnvoys(target, pool);
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
