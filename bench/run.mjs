// `npm run bench`, in four parts:
//
// 1. The side-by-side comparison (bench/compare.mjs), for each RivetKit
//    version of BENCH_RIVETKIT (bench/lib/stacks.mjs; default "3,2.3":
//    rivetkit 3.0.0 on @rivetkit/rivetkit-napi@3.0.0 and on
//    rivetkit-native, on engine 3.0.0; then rivetkit 2.3.19 on
//    @rivetkit/rivetkit-napi@2.3.19 and on rivetkit-native, on engine
//    2.3.19), under a header naming the version: one RivetKit app run on
//    the reference napi and on rivetkit-native, against one private engine
//    of that version; prints both columns and the ratio ours / theirs of
//    host CPU per HTTP and WebSocket action, their client p50/p99, RSS per
//    live actor (1000 actors), spawn → first answered action, and SIGINT →
//    exit with 100 live actors. About 4 minutes per version on 2 cores.
//    Then every shape of work side by side (bench/matrix.mjs): host CPU per
//    action for JSON, CBOR and BARE clients x a counter and a growing,
//    broadcasting ledger x HTTP and WebSocket, and how the ledger's cost
//    compares with the counter's. About 2 minutes more per version.
//    Then the SQLite side-by-side (bench/sqlite.mjs), a fresh engine per side:
//    in-actor latency of single-row INSERT and SELECT (sequential and
//    concurrent), the shape of SQL errors, and RSS per actor with an open
//    database (100 and 1000 actors). About 5 minutes more per version.
//    Then queue messages side by side (bench/queue.mjs): host CPU per
//    message sent, received by an actor's run loop and handled (its state
//    changed and saved), and the send → handled latency. About a minute
//    more per version.
//    With more than one version, the ratios of each version next to each
//    other at the end of part 1 ("Both RivetKit versions").
// 2. rivetkit-native's own scenarios (bench/scenarios/), on a fresh engine
//    2.3.19: an actor host in a child process driven through the gateway;
//    client latency, throughput and the CPU the host (and the engine) spent
//    per operation. Bounded: each load stops at its deadline (the "ok"
//    column says how many operations ran), about a minute on 2 cores.
//
// 3. The cluster scenarios side by side (bench/cluster.mjs, RivetKit and
//    engine 2.3.19): a rolling deploy, a host SIGKILLed and a partition
//    under load, on both addons, and the output gate's cost on ours. About
//    5 minutes more.
//
// 4. The engine-cluster faults side by side (bench/engine-cluster.mjs,
//    RivetKit and engine 2.3.19): a two-node engine on PostgreSQL and NATS,
//    a host's node SIGKILLed, the leader stopped and SIGKILLed, NATS down
//    10 s, on both addons. About 4 minutes more.
//
// Options (environment): BENCH_RIVETKIT=3,2.3 (the RivetKit versions of
// part 1, in that order: "3" or "2.3" for one), BENCH_MATRIX=1 (0: skip the
// matrix; only: the matrix only; knobs in bench/matrix.mjs), BENCH_CLUSTER=1
// (0: skip part 3; only: part 3 only; knobs in bench/cluster.mjs),
// BENCH_ENGINE_CLUSTER=1 (0: skip part 4; only: part 4 only; knobs in
// bench/engine-cluster.mjs), BENCH_COMPARE=1 (0: skip the comparison;
// only: the comparison only; its own knobs are listed in bench/compare.mjs), BENCH_SQLITE=1 (0: skip the SQLite
// side-by-side; only: run nothing else; knobs in bench/sqlite.mjs),
// BENCH_QUEUE=1 (0: skip the queue side-by-side; only: the queue part
// only, for each version of BENCH_RIVETKIT; knobs in bench/queue.mjs),
// BENCH_SCENARIOS=1 (0: skip part 2), BENCH_HOST=native, BENCH_SEQUENTIAL_GET=100, BENCH_SEQUENTIAL=300,
// BENCH_CONCURRENT=600, BENCH_IN_FLIGHT=32, BENCH_ACTORS=4, BENCH_ADDON
// (path of an index.js of another build of the addon; default: this
// package).
//
// New scenarios go in bench/scenarios/ (export {name, run}); new hosts in
// bench/hosts/ and bench/lib/host.mjs.

import { spawnSync } from "node:child_process";

import { compareOptions, ourAddonBinary, runComparison } from "./compare.mjs";
import { startBenchEngine } from "./lib/engine.mjs";
import { startHost } from "./lib/host.mjs";
import { int } from "./lib/knobs.mjs";
import { loadStack, stackKeys } from "./lib/stacks.mjs";
import { clusterOptions, runCluster } from "./cluster.mjs";
import { engineClusterOptions, runEngineCluster } from "./engine-cluster.mjs";
import { matrixOptions, reportMatrix, runMatrix } from "./matrix.mjs";
import { queueOptions, reportQueue, runQueue } from "./queue.mjs";
import { runSqliteComparison, sqliteOptions } from "./sqlite.mjs";
import { fmt, table } from "./lib/stats.mjs";
import httpActions from "./scenarios/http-actions.mjs";
import wsActions from "./scenarios/ws-actions.mjs";
import wsBroadcast from "./scenarios/ws-broadcast.mjs";

const SCENARIOS = [httpActions, wsActions, wsBroadcast];

const options = {
	compare: process.env.BENCH_COMPARE ?? "1",
	matrix: process.env.BENCH_MATRIX ?? "1",
	cluster: process.env.BENCH_CLUSTER ?? "1",
	engineCluster: process.env.BENCH_ENGINE_CLUSTER ?? "1",
	sqlite: process.env.BENCH_SQLITE ?? "1",
	queue: process.env.BENCH_QUEUE ?? "1",
	scenarios: process.env.BENCH_SCENARIOS ?? "1",
	host: process.env.BENCH_HOST ?? "native",
	sequentialGet: int("BENCH_SEQUENTIAL_GET", 100),
	sequential: int("BENCH_SEQUENTIAL", 300),
	concurrent: int("BENCH_CONCURRENT", 600),
	inFlight: int("BENCH_IN_FLIGHT", 32),
	actors: int("BENCH_ACTORS", 4),
};

const started = performance.now();
const elapsed = () => `${fmt((performance.now() - started) / 1000)} s`;

// The engines run in their own process group, out of reach of a terminal's
// Ctrl-C: stop the current one before leaving. (Hosts are children in our
// group and get the terminal's signal themselves.)
let engine = null;
for (const signal of ["SIGINT", "SIGTERM"]) {
	process.once(signal, async () => {
		console.error(`\nbench: ${signal}, stopping the engine`);
		await engine?.stop();
		process.exit(130);
	});
}

// A clone's `npm install` makes the debug build (scripts/build-dev.mjs);
// figures are only worth printing for the release one, so the release
// build runs first, every time: a release binary left from an earlier run
// may be older than the sources (cargo compiles nothing when it is not).
if (!process.env.BENCH_ADDON) {
	const was = ourAddonBinary().build;
	console.log(
		was === "release"
			? "bench: bringing the release build up to date (`npm run build`; nothing to do if the sources did not change)"
			: "bench: the addon is a debug build; building the release one first (`npm run build`, about 7 minutes on 2 cores)",
	);
	const built = spawnSync(process.platform === "win32" ? "npm.cmd" : "npm", ["run", "build"], { stdio: "inherit" });
	if (built.status !== 0) throw new Error("bench: `npm run build` failed");
}
console.log(`bench: ${ourAddonBinary().description}`);

if (options.engineCluster === "only") {
	await runEngineCluster({ options: engineClusterOptions(), log: (m) => console.log(`[${elapsed()}] ${m}`) });
	process.exit(0);
}
if (options.cluster === "only") {
	await runCluster({ options: clusterOptions(), log: (m) => console.log(`[${elapsed()}] ${m}`) });
	process.exit(0);
}
if (options.sqlite === "only") options.compare = "skip";

const stacks = [];
for (const key of stackKeys()) stacks.push(await loadStack(key));
const log = (m) => console.log(`[${elapsed()}] ${m}`);

/** The banner of one RivetKit version's side-by-side parts. */
const banner = (stack) => {
	const rule = "=".repeat(stack.title.length + 8);
	console.log(`\n${rule}\n=== ${stack.title} ===\n${rule}`);
};
/** What each version's parts returned, for the summary of both. */
const outcomes = new Map(stacks.map((stack) => [stack.key, {}]));

const runComparePart = async (stack) => {
	console.log(
		`\n== [${stack.rivetkit}] RivetKit app on @rivetkit/rivetkit-napi@${stack.napi} and on rivetkit-native ==\n`,
	);
	engine = await startBenchEngine({ arch: stack.engineArch });
	try {
		const comparison = await runComparison({ engine, stack, options: compareOptions(), log });
		console.log();
		console.log(comparison.text);
		outcomes.get(stack.key).comparison = comparison;
		if (comparison.failed) process.exitCode = 1;
	} catch (err) {
		log(`compare: rivetkit ${stack.rivetkit} failed: ${err.stack ?? err.message}`);
		process.exitCode = 1;
	} finally {
		await engine.stop();
		engine = null;
	}
};

const runMatrixPart = async (stack) => {
	console.log(
		`\n== [${stack.rivetkit}] Every shape of work on @rivetkit/rivetkit-napi@${stack.napi} and on rivetkit-native ==\n`,
	);
	engine = await startBenchEngine({ arch: stack.engineArch });
	try {
		const matrix = await runMatrix({ engine, stack, options: matrixOptions(), log });
		console.log();
		console.log(reportMatrix(matrix, matrixOptions()));
		outcomes.get(stack.key).matrix = matrix;
	} catch (err) {
		log(`matrix: rivetkit ${stack.rivetkit} failed: ${err.stack ?? err.message}`);
		process.exitCode = 1;
	} finally {
		await engine.stop();
		engine = null;
	}
};

const runSqlitePart = async (stack) => {
	console.log(
		`\n== [${stack.rivetkit}] SQLite (c.db) on @rivetkit/rivetkit-napi@${stack.napi} and on rivetkit-native ==\n`,
	);
	const comparison = await runSqliteComparison({
		stack,
		options: sqliteOptions(),
		log,
		onEngine: (current) => (engine = current),
	});
	console.log();
	console.log(comparison.text);
	if (comparison.failed) process.exitCode = 1;
};

const runQueuePart = async (stack) => {
	console.log(
		`\n== [${stack.rivetkit}] Queue messages on @rivetkit/rivetkit-napi@${stack.napi} and on rivetkit-native ==\n`,
	);
	engine = await startBenchEngine({ arch: stack.engineArch });
	try {
		const result = await runQueue({ engine, stack, options: queueOptions(), log });
		console.log();
		console.log(reportQueue(result, queueOptions()));
		if (result.notes.length) process.exitCode = 1;
	} catch (err) {
		log(`queue: rivetkit ${stack.rivetkit} failed: ${err.stack ?? err.message}`);
		process.exitCode = 1;
	} finally {
		await engine.stop();
		engine = null;
	}
};

/**
 * The versions next to each other: part 1's rows (theirs, ours, ratio per
 * version) and the matrix's ratios ours / theirs, where more than one
 * version ran.
 */
function summary() {
	const ran = stacks.filter((stack) => outcomes.get(stack.key).comparison || outcomes.get(stack.key).matrix);
	if (ran.length < 2) return;
	const version = (stack) => stack.rivetkit;
	console.log(`\n== Both RivetKit versions, each on its own engine and reference napi ==\n`);
	const compared = ran.filter((stack) => outcomes.get(stack.key).comparison);
	if (compared.length > 1) {
		const columns = ["figure"];
		for (const stack of compared)
			columns.push(`${version(stack)} napi`, `${version(stack)} ours`, `${version(stack)} ours / napi`);
		// The headline rows (those above "for information:"), labelled as in the first version's table.
		const first = outcomes.get(compared[0].key).comparison.rows;
		const cut = first.findIndex((row) => row.figure === "for information:");
		const headline = cut < 0 ? first : first.slice(0, cut);
		const rows = headline.map((row, i) => {
			const out = { figure: row.figure };
			for (const stack of compared) {
				const r = outcomes.get(stack.key).comparison.rows[i] ?? {};
				out[`${version(stack)} napi`] = r.theirs ?? "";
				out[`${version(stack)} ours`] = r.ours ?? "";
				out[`${version(stack)} ours / napi`] = r.ratio ?? "";
			}
			return out;
		});
		console.log(table(columns, rows));
		console.log();
	}
	const matrices = ran.filter((stack) => outcomes.get(stack.key).matrix);
	if (matrices.length > 1) {
		const encodings = matrixOptions().encodings;
		const header = `host CPU ours / napi (${matrices.map(version).join(" | ")})`;
		const rows = [];
		for (const transport of ["http", "ws"]) {
			for (const shape of ["counter", "ledger"]) {
				const row = { [header]: `${transport === "http" ? "HTTP" : "WebSocket"}, ${shape}` };
				for (const encoding of encodings) {
					row[encoding] = matrices
						.map((stack) => {
							const cell = outcomes
								.get(stack.key)
								.matrix.cells.find((c) => c.encoding === encoding && c.shape === shape && c.transport === transport);
							return fmt(cell?.ours?.hostCpuMsPerOp / cell?.theirs?.hostCpuMsPerOp, 2);
						})
						.join(" | ");
				}
				rows.push(row);
			}
		}
		console.log(table([header, ...encodings], rows));
	}
}

if (options.queue === "only") {
	for (const stack of stacks) {
		banner(stack);
		await runQueuePart(stack);
	}
	process.exit(process.exitCode ?? 0);
}

if (options.matrix === "only") {
	for (const stack of stacks) {
		banner(stack);
		await runMatrixPart(stack);
	}
	summary();
	process.exit(process.exitCode ?? 0);
}

for (const stack of stacks) {
	const compare = options.compare !== "0" && options.compare !== "skip";
	const matrix = options.matrix !== "0" && options.compare !== "only" && options.sqlite !== "only";
	const sqlite = options.sqlite !== "0" && options.compare !== "only";
	const queue = options.queue !== "0" && options.compare !== "only" && options.sqlite !== "only";
	if (!compare && !matrix && !sqlite && !queue) break;
	banner(stack);
	if (compare) await runComparePart(stack);
	if (matrix) await runMatrixPart(stack);
	if (sqlite) await runSqlitePart(stack);
	if (queue) await runQueuePart(stack);
}
summary();

if (options.scenarios !== "0" && options.compare !== "only" && options.sqlite !== "only") {
	console.log(`\n== rivetkit-native scenarios (host=${options.host}, engine 2.3.19) ==\n`);
	engine = await startBenchEngine();
	let host;
	try {
		const pool = `bench-${process.pid}`;
		const hostStarted = performance.now();
		host = await startHost({ impl: options.host, endpoint: engine.endpoint, pool });
		console.log(`bench: engine and host ready; host start ${fmt((performance.now() - hostStarted) / 1000)} s`);

		const rows = [];
		for (const scenario of SCENARIOS) rows.push(...(await scenario.run({ engine, host, pool, options })));

		const columns = [
			"scenario",
			"ok",
			"errors",
			"p50 ms",
			"p90 ms",
			"p99 ms",
			"ops/s",
			"host CPU ms/op",
			"engine CPU ms/op",
			"host RSS MB",
		];
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
		if (rows.some((r) => r.errors > 0)) process.exitCode = 1;
	} finally {
		await host?.stop();
		await engine.stop();
		engine = null;
	}
}
if (options.cluster !== "0" && options.compare !== "only" && options.sqlite !== "only") {
	console.log("\n== Cluster scenarios on @rivetkit/rivetkit-napi@2.3.19 and on rivetkit-native (engine 2.3.19) ==\n");
	await runCluster({ options: clusterOptions(), log: (m) => console.log(`[${elapsed()}] ${m}`) });
}
if (
	options.engineCluster !== "0" &&
	options.cluster !== "only" &&
	options.compare !== "only" &&
	options.sqlite !== "only"
) {
	console.log(
		"\n== Engine-cluster faults on @rivetkit/rivetkit-napi@2.3.19 and on rivetkit-native (engine 2.3.19) ==\n",
	);
	await runEngineCluster({ options: engineClusterOptions(), log: (m) => console.log(`[${elapsed()}] ${m}`) });
}
console.log(`\nbench: done in ${elapsed()}`);
