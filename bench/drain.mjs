// Where the time of a SIGINT drain goes (docs/drain.md): one host with N
// live actors on a private bench engine, SIGINT, and the timeline of the
// drain from the host's `rivetkit_native::drain` trace events (JSON logs on
// its stderr), relative to the SIGINT:
//
//   node bench/drain.mjs            # 100 actors, the RivetKit app on ours
//   BENCH_DRAIN_ACTORS=1000 node bench/drain.mjs
//   BENCH_DRAIN_IMPL=rivetkit-napi node bench/drain.mjs   # the reference (exit time only)
//
// Knobs: BENCH_DRAIN_ACTORS=100, BENCH_DRAIN_IMPL=rivetkit-native
// (rivetkit-native: bench/apps/rivetkit-app.mjs through RivetKit on this
// addon; native: bench/hosts/native.mjs; rivetkit-napi: the reference
// addon, no trace), BENCH_WAKE_IN_FLIGHT=2 (concurrent wakes),
// BENCH_EXIT_BOUND_MS=60000, BENCH_DRAIN_LOG (more log directives for the
// host, e.g. `rivet_envoy_client::commands=info`; their events join the timeline), BENCH_DRAIN_RUNS=1 (SIGINTs, one fresh host
// each, same engine, a pool each), BENCH_DRAIN_WAKE=create (create: engine
// API create, then one action by id; getOrCreate: one action by key, as
// bench/compare.mjs does), BENCH_DRAIN_WAKE_DEADLINE_S=300 (wakes stop
// there), BENCH_DRAIN_SETTLE=1 (0: SIGINT 500 ms after the last wake, as
// bench/compare.mjs does, without waiting for the engine to settle),
// BENCH_ADDON (another build of ours), BENCH_DRAIN_RAW=1 (also prints each
// stop received and each re-ask, in ms after the SIGINT), BENCH_DRAIN_SHED=1
// (samples the engine's metrics every 50 ms during the drain: its workflow
// pulls, their load-shedding ratio and its smoothed CPU). A host that ends
// with another signal than SIGINT (a crash) gets its stderr printed.

import { createActor, getActor } from "../__test__/helpers/engine.mjs";
import { envoyRegistered, newClient, sigintToExit, wake } from "./compare.mjs";
import { engineSettled, startBenchEngine, upsertRunnerConfig } from "./lib/engine.mjs";
import { spawnHost } from "./lib/host.mjs";
import { int } from "./lib/knobs.mjs";
import { processCpuMs } from "./lib/proc.mjs";
import { run } from "./lib/load.mjs";
import { fmt, table } from "./lib/stats.mjs";

const options = {
	actors: int("BENCH_DRAIN_ACTORS", 100),
	impl: process.env.BENCH_DRAIN_IMPL ?? "rivetkit-native",
	wakeInFlight: int("BENCH_WAKE_IN_FLIGHT", 2),
	exitBoundMs: int("BENCH_EXIT_BOUND_MS", 60_000),
	runs: int("BENCH_DRAIN_RUNS", 1),
	wake: process.env.BENCH_DRAIN_WAKE ?? "create",
	wakeDeadlineMs: int("BENCH_DRAIN_WAKE_DEADLINE_S", 300) * 1000,
	settle: process.env.BENCH_DRAIN_SETTLE !== "0",
};
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const wallNow = () => performance.timeOrigin + performance.now();

/** The host's environment: our drain trace as JSON, RivetKit's own logs at warn. */
const TRACE_ENV = {
	// Empty level variables: RivetKit's JS logger falls back to warn, ours
	// to RUST_LOG (docs/drain.md, "Timeline").
	RIVET_LOG_LEVEL: "",
	LOG_LEVEL: "",
	RUST_LOG: `warn,rivetkit_native::drain=debug${process.env.BENCH_DRAIN_LOG ? `,${process.env.BENCH_DRAIN_LOG}` : ""}`,
	RUST_LOG_FORMAT: "json",
};

/** Trace events of the host's stderr: `{ms (after SIGINT), message, actorId}`. */
function traceEvents(stderr, sigintWall) {
	const events = [];
	for (const line of stderr.split("\n")) {
		if (!line.startsWith("{")) continue;
		let record;
		try {
			record = JSON.parse(line);
		} catch {
			continue;
		}
		const warning = record.level === "WARN" || record.level === "ERROR";
		if (record.target !== "rivetkit_native::drain" && !warning && !process.env.BENCH_DRAIN_LOG) continue;
		const count = record.command_count ?? record.actors;
		let message = count !== undefined ? `${record.message} (${count})` : record.message;
		if (record.message === "websocket session ended") message = `${message} (${record.reason})`;
		if (warning) message = `${record.level}: ${message}`.slice(0, 90);
		events.push({ ms: Date.parse(record.timestamp) - sigintWall, message, actorId: record.actor_id });
	}
	return events;
}

/** Per event kind: how many, first, median, last (ms after SIGINT). */
function timeline(events, exitMs) {
	const kinds = new Map();
	for (const e of events) kinds.set(e.message, [...(kinds.get(e.message) ?? []), e.ms]);
	const rows = [...kinds].map(([message, times]) => {
		const sorted = times.sort((a, b) => a - b);
		return {
			event: message,
			count: String(sorted.length),
			first: fmt(sorted[0], 0),
			median: fmt(sorted[Math.floor(sorted.length / 2)], 0),
			last: fmt(sorted.at(-1), 0),
		};
	});
	rows.sort((a, b) => Number(a.first) - Number(b.first));
	rows.push({ event: "process exit (seen by the parent)", count: "1", first: fmt(exitMs, 0), median: "", last: "" });
	return table(["event", "count", "first", "median", "last"], rows);
}

/** Per actor, medians and maxima between the steps of its stop that it went through. */
function perActor(events) {
	const byActor = new Map();
	for (const e of events) {
		if (!e.actorId) continue;
		const entry = byActor.get(e.actorId) ?? {};
		entry[e.message] ??= e.ms;
		byActor.set(e.actorId, entry);
	}
	const steps = [
		["stop here", "stop hook done"],
		["stop received", "stop hook done"],
		["stop hook done", "final save done"],
		["final save done", "stop reported"],
		["stop received", "engine's stop answered"],
	];
	const lines = [];
	for (const [from, to] of steps) {
		const d = [...byActor.values()]
			.filter((a) => a[from] !== undefined && a[to] !== undefined && a[to] >= a[from])
			.map((a) => a[to] - a[from]);
		d.sort((a, b) => a - b);
		if (d.length)
			lines.push(
				`  ${from} → ${to}: median ${fmt(d[Math.floor(d.length / 2)], 0)} ms, max ${fmt(d.at(-1), 0)} ms (${d.length} actors)`,
			);
	}
	const unstopped = [...byActor]
		.filter(([, a]) => a["stop here"] !== undefined && a["stop received"] === undefined)
		.map(([id]) => id);
	if (unstopped.length)
		lines.push(
			`  not stopped by the engine: ${unstopped.length}${unstopped.length <= 10 ? ` (${unstopped.join(", ")})` : ""}`,
		);
	const stops = events.filter((e) => e.message === "stop received").map((e) => e.ms);
	if (stops.length) {
		const bucket = 250;
		const counts = new Map();
		for (const ms of stops) counts.set(Math.floor(ms / bucket), (counts.get(Math.floor(ms / bucket)) ?? 0) + 1);
		const text = [...counts]
			.sort((a, b) => a[0] - b[0])
			.map(([b, n]) => `${b * bucket}:${n}`)
			.join(" ");
		lines.push(`  stops received per ${bucket} ms (start:count): ${text}`);
	}
	return lines.join("\n");
}

/**
 * Creates actor `key` through the engine API (its start follows the
 * create) and sends it one `increment` by id (gateway path routing). Much
 * quicker here than `getOrCreate` by key, whose query resolution timed out
 * after 15 s for a tenth of the wakes on a loaded machine.
 */
async function createAndAct(engine, client, pool, key, ids) {
	const actor = await createActor(engine.endpoint, { name: "counter", key, pool });
	ids.push(actor.actor_id);
	const handle = client.counter.getForId(actor.actor_id);
	try {
		await handle.increment(1);
	} catch {
		await handle.increment(1);
	}
}

/**
 * How long after the exit the engine had every actor in `ids` asleep (no
 * host of the pool is connected then), polled every 250 ms for at most
 * 60 s; and how many it destroyed or marked with an error.
 */
async function asleepAfter(engine, ids) {
	const started = performance.now();
	let records = [];
	while (performance.now() - started < 60_000) {
		records = [];
		await run({ total: ids.length, inFlight: 8, deadlineMs: 60_000 }, async (i) =>
			records.push(await getActor(engine.endpoint, ids[i])),
		);
		if (records.every((r) => r?.sleep_ts || r?.destroy_ts)) break;
		await sleep(250);
	}
	const asleep = records.filter((r) => r?.sleep_ts && !r.destroy_ts).length;
	const destroyed = records.filter((r) => r?.destroy_ts).length;
	const errored = records.filter((r) => r?.error).length;
	return `${asleep} of ${ids.length} actors asleep in the engine ${fmt((performance.now() - started) / 1000)} s after the exit (${destroyed} destroyed, ${errored} with an error)`;
}

async function oneRun(engine, pool, runIndex) {
	const client = newClient(engine, pool, "bare");
	const host = spawnHost({
		impl: options.impl,
		endpoint: engine.endpoint,
		pool,
		token: engine.token,
		env: TRACE_ENV,
		captureStderr: true,
	});
	try {
		await envoyRegistered(engine.endpoint, pool, host);
		await host.ready;
		const ids = [];
		const woke = await run(
			{ total: options.actors, inFlight: options.wakeInFlight, deadlineMs: options.wakeDeadlineMs },
			(i) =>
				options.wake === "getOrCreate"
					? wake(client, `drain-${runIndex}-${i}`)
					: createAndAct(engine, client, pool, `drain-${runIndex}-${i}`, ids),
		);
		const live = woke.latencies.length;
		console.log(`drain: ${live} actors woken in ${fmt(woke.wallMs / 1000)} s (${woke.errors.length} errors)`);
		// A drain measured while the engine still works through the wakes
		// (its workflows backlogged: creates timed out under load here)
		// measures that backlog; start from an engine at rest.
		if (options.settle) {
			const share = await engineSettled(engine.pid, { timeoutMs: 60_000 });
			console.log(`drain: engine at ${fmt(share * 100, 0)}% of a core before the SIGINT`);
		}
		await sleep(500);
		const engineCpuBefore = processCpuMs(engine.pid);
		const hostCpuBefore = processCpuMs(host.pid);
		let hostCpuLast = hostCpuBefore;
		const sampler = setInterval(() => (hostCpuLast = processCpuMs(host.pid) ?? hostCpuLast), 20);
		const sigintWall = wallNow();
		const shed = [];
		let shedTimer = null;
		if (process.env.BENCH_DRAIN_SHED) {
			const url = `http://127.0.0.1:${engine.metricsPort}/metrics`;
			const read = async () => {
				const text = await (await fetch(url)).text();
				const pick = (name) => Number(text.match(new RegExp(`^${name} (\\S+)`, "m"))?.[1] ?? Number.NaN);
				shed.push({
					ms: wallNow() - sigintWall,
					sum: pick("rivet_gasoline_load_shedding_ratio_sum"),
					count: pick("rivet_gasoline_load_shedding_ratio_count"),
					cpu: pick("rivet_gasoline_cpu_usage_smoothed_sum"),
					cpuN: pick("rivet_gasoline_cpu_usage_smoothed_count"),
				});
			};
			await read();
			shedTimer = setInterval(() => read().catch(() => {}), 50);
		}
		const exit = await sigintToExit(host, options.exitBoundMs);
		clearInterval(sampler);
		if (shedTimer) {
			clearInterval(shedTimer);
			const rows = [];
			for (let i = 1; i < shed.length; i++) {
				const n = shed[i].count - shed[i - 1].count;
				if (!n) continue;
				rows.push(
					`${fmt(shed[i].ms, 0)}:${n}p r${fmt((shed[i].sum - shed[i - 1].sum) / n)} c${fmt((shed[i].cpu - shed[i - 1].cpu) / (shed[i].cpuN - shed[i - 1].cpuN))}`,
				);
			}
			console.log(`pulls (ms:pulls ratio cpuSmoothed): ${rows.join(" ")}`);
		}
		const engineCpu = processCpuMs(engine.pid) - engineCpuBefore;
		const exitText = exit.timedOut
			? `no exit within ${options.exitBoundMs} ms (killed)`
			: `${fmt(exit.ms, 0)} ms (${exit.signal ?? `code ${exit.code}`})`;
		console.log(`drain: ${options.impl}, SIGINT with ${live} live actors → exit ${exitText}`);
		console.log(
			`drain: CPU during the drain: engine ${fmt(engineCpu, 0)} ms, host at least ${fmt(hostCpuLast - hostCpuBefore, 0)} ms (sampled every 20 ms)`,
		);
		const events = traceEvents(host.stderr(), sigintWall);
		if (exit.signal && exit.signal !== "SIGINT") {
			const plain = host
				.stderr()
				.split("\n")
				.filter((l) => !l.startsWith("{") || !l.endsWith("}") || /panic/.test(l));
			console.log(
				`drain: the host ended with ${exit.signal}; its stderr (other than the trace), last lines:\n${plain.slice(-30).join("\n")}`,
			);
		}
		if (events.length) {
			console.log(timeline(events, exit.ms));
			console.log(perActor(events));
			if (process.env.BENCH_DRAIN_RAW) {
				const pick = events.filter(
					(e) => e.message.startsWith("stop received") || e.message.startsWith("sleep intents sent again"),
				);
				console.log(pick.map((e) => `${fmt(e.ms, 0)}${e.message.startsWith("sleep") ? "A" : ""}`).join(" "));
			}
		} else if (options.impl !== "rivetkit-napi") {
			console.log(`drain: no trace events; host stderr tail:\n${host.stderr().split("\n").slice(-20).join("\n")}`);
		}
		if (ids.length) console.log(`drain: ${await asleepAfter(engine, ids)}`);
		return exit.ms;
	} finally {
		await host.kill();
		await client.dispose();
	}
}

let engine = null;
process.once("SIGINT", async () => {
	await engine?.stop();
	process.exit(130);
});
engine = await startBenchEngine();
try {
	const figures = [];
	for (let i = 0; i < options.runs; i++) {
		// A pool per run: the engine reschedules the actors a host stopped
		// onto the next host of its pool.
		const pool = `drain-${process.pid}-${i}`;
		await upsertRunnerConfig(engine.endpoint, pool);
		figures.push(await oneRun(engine, pool, i));
		await engineSettled(engine.pid, { timeoutMs: 20_000 });
	}
	if (figures.length > 1) console.log(`drain: exit ms per run: ${figures.map((f) => fmt(f, 0)).join(", ")}`);
} finally {
	await engine.stop();
}
