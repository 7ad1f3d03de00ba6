// `npm run bench`: a private engine, an actor host in a child process, and
// load from this process through the engine's gateway. Prints client
// latency, throughput and the CPU the host (and the engine) spent per
// operation. Bounded: each load stops at its deadline (the "ok" column
// says how many operations ran), about a minute in all on 2 cores.
//
// Options (environment): BENCH_HOST=native, BENCH_SEQUENTIAL_GET=100,
// BENCH_SEQUENTIAL=300,
// BENCH_CONCURRENT=600, BENCH_IN_FLIGHT=32, BENCH_ACTORS=4, BENCH_ADDON
// (path of an index.js of another build of the addon; default: this package).
//
// New scenarios go in bench/scenarios/ (export {name, run}); new hosts
// (e.g. the reference addon, for comparison) in bench/hosts/ and
// bench/lib/host.mjs.

import { readdirSync, statSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

import { startEngine } from "./lib/engine.mjs";
import { startHost } from "./lib/host.mjs";
import { fmt, table } from "./lib/stats.mjs";
import httpActions from "./scenarios/http-actions.mjs";
import wsActions from "./scenarios/ws-actions.mjs";
import wsBroadcast from "./scenarios/ws-broadcast.mjs";

const SCENARIOS = [httpActions, wsActions, wsBroadcast];

const int = (name, fallback) => {
	const value = Number.parseInt(process.env[name] ?? "", 10);
	return Number.isFinite(value) && value > 0 ? value : fallback;
};
const options = {
	host: process.env.BENCH_HOST ?? "native",
	sequentialGet: int("BENCH_SEQUENTIAL_GET", 100),
	sequential: int("BENCH_SEQUENTIAL", 300),
	concurrent: int("BENCH_CONCURRENT", 600),
	inFlight: int("BENCH_IN_FLIGHT", 32),
	actors: int("BENCH_ACTORS", 4),
};

/** Which build the host loads: its size tells a debug build from a release one. */
function addonDescription() {
	const dir = process.env.BENCH_ADDON ? dirname(resolve(process.env.BENCH_ADDON)) : fileURLToPath(new URL("..", import.meta.url));
	const binary = readdirSync(dir).find((f) => f.startsWith("rivetkit-native.") && f.endsWith(".node"));
	if (!binary) return `no addon binary in ${dir}`;
	const mb = statSync(join(dir, binary)).size / (1024 * 1024);
	return `addon ${binary} (${mb.toFixed(1)} MB: ${mb > 40 ? "debug" : "release"} build)`;
}

const started = performance.now();
console.log(`bench: host=${options.host}, ${addonDescription()}`);
const engine = await startEngine();
let host;
try {
	const pool = `bench-${process.pid}`;
	host = await startHost({ impl: options.host, endpoint: engine.endpoint, pool });
	console.log(`bench: engine and host ready in ${fmt((performance.now() - started) / 1000)} s`);

	const rows = [];
	for (const scenario of SCENARIOS) rows.push(...(await scenario.run({ engine, host, pool, options })));

	const columns = ["scenario", "ok", "errors", "p50 ms", "p90 ms", "p99 ms", "ops/s", "host CPU ms/op", "engine CPU ms/op", "host RSS MB"];
	console.log();
	console.log(
		table(
			columns,
			rows.map((r) => ({
				scenario: r.scenario,
				ok: r.ops,
				errors: r.errors,
				"p50 ms": fmt(r.p50),
				"p90 ms": fmt(r.p90),
				"p99 ms": fmt(r.p99),
				"ops/s": fmt(r.perSecond),
				"host CPU ms/op": fmt(r.hostCpuMsPerOp, 3),
				"engine CPU ms/op": fmt(r.engineCpuMsPerOp, 2),
				"host RSS MB": fmt(r.hostRssMb),
			})),
		),
	);
	for (const r of rows) if (r.firstError) console.log(`first error in "${r.scenario}": ${r.firstError}`);
	console.log(`\nbench: done in ${fmt((performance.now() - started) / 1000)} s`);
	if (rows.some((r) => r.errors > 0)) process.exitCode = 1;
} finally {
	await host?.stop();
	await engine.stop();
}
