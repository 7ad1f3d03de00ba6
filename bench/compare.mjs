// The side-by-side comparison: one RivetKit app (bench/apps/rivetkit-app.mjs,
// `actor()`/`setup()` from "rivetkit", started with RivetKit's own
// `registry.start()` lifecycle and SIGINT handler) run twice against one
// engine, on the reference @rivetkit/rivetkit-napi ("theirs") and on
// rivetkit-native ("ours"), the same `rivetkit` files both times, for one
// RivetKit version (a "stack" of bench/lib/stacks.mjs: rivetkit 3.0.0 with
// napi 3.0.0 on engine 3.0, or rivetkit 2.3.19 with napi 2.3.19 on engine
// 2.3.19; the engine is the caller's and must be of that version). Ours is
// installed under the reference's package name as an npm alias would
// (bench/lib/rivetkit-alias.mjs: hard links of rivetkit next to a symlink
// named @rivetkit/rivetkit-napi); neither side runs a module hook. Every
// host reports which `.node` file it mapped (/proc/self/maps), and the run
// fails if it is not the expected one. The client is that version's own.
//
// Host processes per addon, each with a pool and actor keys of its own:
//   main  spawn → first answered action: polls the engine until the host's
//         envoy is registered, then sends a first `increment` through the
//         official client (an action sent before the pool has an envoy waits
//         ~60 s in the engine, whichever the addon); the median of
//         `startTrials` spawns, each on a pool of its own, the last one
//         being the main host (the others are killed). With both main hosts
//         up: sequential HTTP actions (a `getForId` handle: gateway path
//         routing), then sequential WebSocket actions (`handle.connect()`),
//         each kind in `rounds` chunks taken by the two hosts in turns (the
//         side going first alternates), so that a change of load on the
//         machine weighs on both alike; the host's CPU time per action (its
//         own `process.cpuUsage()`, over IPC) and client p50/p99. Then, one
//         side after the other, `actorsSigint` live actors and SIGINT → exit
//         (bounded), and a wait (at most 20 s) until the engine, which
//         reschedules the actors that host stopped, uses less than 10% of a
//         core. (Destroying them instead made the next host's first
//         getOrCreate time out in the engine now and then.)
//   rss   RSS per live actor: RSS delta (after a full GC in the host, once
//         its memory stopped shrinking) from waking `actorsRss` actors with
//         one action each (they stay awake: sleepTimeout 10 min), divided by
//         the actors woken. These hosts stay
//         up, idle, until the end: stopping one would leave the engine busy
//         with its actors while the other side is measured. At the end each
//         gets a SIGINT with those actors live (SIGINT → exit with 1000).
// Order: theirs' start-up, ours, the actions in turns, theirs' SIGINT,
// ours, theirs rss, ours rss, theirs' SIGINT with 1000, ours.
//
// Knobs (environment): BENCH_COMPARE_HTTP=150, BENCH_COMPARE_WS=300
// (sequential actions measured), BENCH_ACTORS_SIGINT=100,
// BENCH_ACTORS_RSS=1000, BENCH_START_TRIALS=3 (spawns timed per side; the
// figure is their median), BENCH_ROUNDS=3 (chunks per action kind),
// BENCH_WAKE_IN_FLIGHT=2 (concurrent wakes: at 4 and
// more, some of the engine's getOrCreate calls timed out after 15 s here,
// whichever the addon; seen with the harness's 7 s envoy-lost threshold, not
// re-measured with the bench engine's), BENCH_EXIT_BOUND_MS=60000,
// BENCH_COMPARE_ENCODING=bare (client encoding: json, cbor, bare),
// BENCH_COMPARE_PHASES=main,rss (which phases run), BENCH_RSS_DEADLINE_S=360
// (bound of the RSS wakes: the side measured second wakes its actors with
// the other side's 1000 still live in the engine, about 4 a second here,
// and 180 s left it short of 1000), BENCH_ADDON (ours:
// the index.js of another build).

import { readdirSync, readFileSync, realpathSync, statSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

import { engineSettled, listEnvoys } from "./lib/engine.mjs";
import { spawnSideHost } from "./lib/host.mjs";
import { int } from "./lib/knobs.mjs";
import { run } from "./lib/load.mjs";
import { measure, merge } from "./lib/measure.mjs";
import { processCpuMs } from "./lib/proc.mjs";
import { loadStack } from "./lib/stacks.mjs";
import { fmt, table } from "./lib/stats.mjs";

export const compareOptions = () => ({
	http: int("BENCH_COMPARE_HTTP", 150),
	ws: int("BENCH_COMPARE_WS", 300),
	actorsSigint: int("BENCH_ACTORS_SIGINT", 100),
	actorsRss: int("BENCH_ACTORS_RSS", 1000),
	wakeInFlight: int("BENCH_WAKE_IN_FLIGHT", 2),
	exitBoundMs: int("BENCH_EXIT_BOUND_MS", 60_000),
	startTrials: int("BENCH_START_TRIALS", 3),
	rounds: int("BENCH_ROUNDS", 3),
	rssDeadlineS: int("BENCH_RSS_DEADLINE_S", 360),
	encoding: process.env.BENCH_COMPARE_ENCODING ?? "bare",
	phases: (process.env.BENCH_COMPARE_PHASES ?? "main,rss").split(","),
});

/** RivetKit 2.3.19 on engine 2.3.19: the stack of callers that name none (cluster.mjs, drain.mjs). */
export const STACK_2_3 = await loadStack("2.3");
/** The two sides of RivetKit 2.3.19: label, host impl, and the `.node` file its host must map. */
export const SIDES = STACK_2_3.sides;

/** The `.node` file our side should load (BENCH_ADDON or this package), and its build. */
export function ourAddonBinary() {
	const dir = process.env.BENCH_ADDON
		? dirname(resolve(process.env.BENCH_ADDON))
		: fileURLToPath(new URL("..", import.meta.url));
	const binary = readdirSync(dir).find((f) => f.startsWith("rivetkit-native.") && f.endsWith(".node"));
	if (!binary) return { path: null, description: `no addon binary in ${dir}` };
	const path = realpathSync(join(dir, binary));
	const mb = statSync(path).size / (1024 * 1024);
	// scripts/build.mjs and scripts/build-dev.mjs record which build the root binary is.
	let build = mb > 30 ? "debug" : "release";
	try {
		build = JSON.parse(readFileSync(join(dir, "target", "addon-build.json"), "utf8")).profile ?? build;
	} catch {}
	return { path, build, description: `${path} (${mb.toFixed(1)} MB: ${build} build)` };
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const cpuMs = (sample) => sample.userMs + sample.systemMs;

/**
 * Resolves (to the time) once an envoy of `pool` is registered (engine 3.0:
 * a node of the pool); polls every 20 ms. `engine` is an engine object or
 * an endpoint.
 */
export async function envoyRegistered(engine, pool, host, timeoutMs = 60_000) {
	const deadline = performance.now() + timeoutMs;
	let exited = null;
	host.exited.then((e) => (exited = e));
	for (;;) {
		if (exited)
			throw new Error(`host exited before its envoy registered (code ${exited.code}, signal ${exited.signal})`);
		try {
			if ((await listEnvoys(engine, pool)).some((e) => (e.pool_name ?? pool) === pool && !e.stop_ts))
				return performance.now();
		} catch {}
		if (performance.now() > deadline) throw new Error(`no envoy of pool ${pool} registered within ${timeoutMs} ms`);
		await sleep(20);
	}
}

/** Checks that `host` mapped the addon of `spec` (and no other); returns its path. */
async function checkAddon(host, spec, ours) {
	const { files } = await host.request("addon");
	const addons = files.filter((f) => /\/rivetkit-(napi|native)\.[^/]+\.node( \(deleted\))?$/.test(f));
	const mapped = addons.find((f) => spec.addon.test(f.replace(/ \(deleted\)$/, "")));
	if (!mapped || addons.length !== 1) throw new Error(`${spec.label} host mapped ${JSON.stringify(addons)}`);
	if (spec.side === "ours" && ours.path && mapped !== ours.path) {
		throw new Error(`${spec.label} host mapped ${mapped}, expected ${ours.path}`);
	}
	return mapped;
}

/** Sends SIGINT and waits for the exit, at most `boundMs`; kills the host past that. */
export async function sigintToExit(host, boundMs) {
	const sentAt = performance.now();
	host.child.kill("SIGINT");
	const result = await Promise.race([host.exited, sleep(boundMs).then(() => null)]);
	if (result) return { ms: result.at - sentAt, code: result.code, signal: result.signal };
	await host.kill();
	return { ms: Number.NaN, timedOut: true };
}

/** Wakes actor `key` with one `increment` (getOrCreate), trying twice. */
export async function wake(client, key) {
	try {
		await client.counter.getOrCreate([key]).increment(1);
	} catch {
		await client.counter.getOrCreate([key]).increment(1);
	}
}

/** The official client of `stack`'s rivetkit (default 2.3.19) for `pool` on `engine`. */
export const newClient = (engine, pool, encoding, stack = STACK_2_3) =>
	stack.createClient({
		endpoint: engine.endpoint,
		namespace: "default",
		token: engine.token,
		poolName: pool,
		encoding,
	});

/**
 * Spawns a host of `spec` on a pool of its own (`tag` in its name) and
 * times it: spawn → envoy registered, spawn → first answered action.
 * Returns `{host, client, first, startMs, envoyMs}`; the host keeps running.
 */
async function startTrial({ engine, stack, spec, options, out, tag }) {
	const pool = `cmp-${spec.side}-${tag}-${process.pid}`;
	const client = newClient(engine, pool, options.encoding, stack);
	const host = await spawnSideHost({ engine, stack, spec, pool });
	try {
		const envoyAt = await envoyRegistered(engine, pool, host);
		const first = client.counter.getOrCreate([`${spec.side}-${tag}-0`]);
		let startMs;
		try {
			await first.increment(1);
			startMs = performance.now() - host.spawnedAt;
		} catch (err) {
			// Seen now and then, for either addon: the engine's getOrCreate
			// times out after 15 s. Then this trial has no start-up figure.
			startMs = Number.NaN;
			out.notes.push(`the first action of start-up trial ${tag} failed (${err.message}); retried`);
			await first.increment(1);
		}
		return { host, client, first, startMs, envoyMs: envoyAt - host.spawnedAt };
	} catch (err) {
		await host.kill();
		await client.dispose();
		throw err;
	}
}

/** The median of the finite `values`, or NaN. */
function median(values) {
	const sorted = values.filter(Number.isFinite).sort((a, b) => a - b);
	if (!sorted.length) return Number.NaN;
	const mid = Math.floor(sorted.length / 2);
	return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
}

/**
 * Starts the main host of one side: `startTrials` timed spawns, the last
 * of which stays up as the main host. Returns `{host, client, first}`.
 */
async function startMain({ engine, stack, spec, options, ours, out, log }) {
	// Start-up is timed over several spawns (the last one is the main
	// host): now and then the engine takes seconds to place an actor
	// (its own allocation, not the host: seen for either addon), which a
	// single spawn would report as the host's start-up.
	const trials = [];
	for (let t = 1; t < options.startTrials; t++) {
		const trial = await startTrial({ engine, stack, spec, options, out, tag: `start${t}` });
		trials.push(trial);
		await trial.host.kill();
		await trial.client.dispose();
	}
	const main = await startTrial({ engine, stack, spec, options, out, tag: "main" });
	trials.push(main);
	try {
		out.startTrialsMs = trials.map((t) => t.startMs);
		out.startMs = median(out.startTrialsMs);
		out.envoyMs = median(trials.map((t) => t.envoyMs));
		await main.host.ready;
		out.mapped = await checkAddon(main.host, spec, ours);
		log(
			`${spec.label}: first action answered ${out.startTrialsMs.map((ms) => fmt(ms, 0)).join(", ")} ms after spawn ` +
				`(median ${fmt(out.startMs, 0)}); host mapped ${out.mapped}`,
		);
		return main;
	} catch (err) {
		await main.host.kill();
		await main.client.dispose();
		throw err;
	}
}

/**
 * Sequential HTTP and WebSocket actions on every main host, in turns: each
 * kind in `rounds` chunks, the sides alternating (and which side goes first
 * alternating too), so that a change of load on the machine (other
 * processes, the engine) weighs on both sides alike. Sets `out.http` and
 * `out.ws` of each side.
 */
async function measureInTurns({ engine, options, mains, log }) {
	for (const m of mains) {
		m.byId = m.client.counter.getForId(await m.first.resolve());
		m.conn = m.first.connect();
		for (let i = 0; i < 10; i++) await m.byId.increment(1);
		for (let i = 0; i < 10; i++) await m.conn.increment(1);
		m.rows = { http: [], ws: [] };
	}
	const rounds = options.rounds;
	const kinds = [
		{ key: "http", total: options.http, deadlineMs: 25_000, op: (m) => m.byId.increment(1) },
		{ key: "ws", total: options.ws, deadlineMs: 20_000, op: (m) => m.conn.increment(1) },
	];
	try {
		for (const kind of kinds) {
			for (let r = 0; r < rounds; r++) {
				const order = r % 2 === 0 ? mains : [...mains].reverse();
				for (const m of order) {
					const total = Math.floor(kind.total / rounds) + (r < kind.total % rounds ? 1 : 0);
					const load = { total, inFlight: 1, deadlineMs: kind.deadlineMs / rounds };
					m.rows[kind.key].push(await measure({ host: m.host, enginePid: engine.pid, load }, () => kind.op(m)));
				}
			}
		}
	} finally {
		for (const m of mains) await m.conn.dispose();
	}
	for (const m of mains) {
		m.out.http = merge(m.rows.http);
		m.out.ws = merge(m.rows.ws);
		log(
			`${m.spec.label}: HTTP action p50 ${fmt(m.out.http.p50)} ms (${m.out.http.ops} ok, ${m.out.http.errors} errors), ` +
				`WebSocket action p50 ${fmt(m.out.ws.p50)} ms (${m.out.ws.ops} ok, ${m.out.ws.errors} errors)`,
		);
	}
}

/** `actorsSigint` live actors on a main host, then SIGINT → exit. */
async function sigintPhase({ engine, options, main, log }) {
	const { spec, out, host, client } = main;
	const prefix = `${spec.side}-main-`;
	const more = options.actorsSigint - 1;
	const woke = await run({ total: more, inFlight: options.wakeInFlight, deadlineMs: 60_000 }, (i) =>
		wake(client, `${prefix}${i + 1}`),
	);
	out.liveActors = woke.latencies.length + 1;
	if (woke.errors.length)
		out.notes.push(`${woke.errors.length} of ${more} wakes before SIGINT failed: ${woke.errors[0].message}`);
	await sleep(500);
	out.exit = await sigintToExit(host, options.exitBoundMs);
	log(
		`${spec.label}: SIGINT with ${out.liveActors} live actors → ` +
			(out.exit.timedOut
				? `no exit within ${options.exitBoundMs / 1000} s (killed)`
				: `exit in ${fmt(out.exit.ms, 0)} ms (${out.exit.signal ?? `code ${out.exit.code}`})`),
	);
	// The engine now reschedules the actors the host stopped (backing off);
	// let it quieten before the next host is measured.
	const share = await engineSettled(engine.pid, { timeoutMs: 20_000 });
	log(`${spec.label}: engine back to ${fmt(share * 100, 0)}% of a core`);
}

/** The main hosts of both sides (see the top of the file). */
async function mainPhases({ engine, stack, options, ours, results, log }) {
	const mains = [];
	try {
		for (const spec of stack.sides) {
			const out = results[spec.side];
			try {
				mains.push({ spec, out, ...(await startMain({ engine, stack, spec, options, ours, out, log })) });
			} catch (err) {
				out.notes.push(`main phase failed: ${err.message}`);
				log(`compare: ${spec.label} failed to start: ${err.stack ?? err.message}`);
			}
		}
		try {
			await measureInTurns({ engine, options, mains, log });
		} catch (err) {
			for (const m of mains) m.out.notes.push(`main phase failed: ${err.message}`);
			log(`compare: the action measurements failed: ${err.stack ?? err.message}`);
		}
		for (const main of mains) {
			try {
				await sigintPhase({ engine, options, main, log });
			} catch (err) {
				main.out.notes.push(`main phase failed: ${err.message}`);
				log(`compare: ${main.spec.label} SIGINT phase failed: ${err.stack ?? err.message}`);
			}
		}
	} finally {
		for (const m of mains) {
			await m.host.kill();
			await m.client.dispose();
		}
	}
}

/**
 * The host's memory once it has stopped shrinking: a full GC and a sample
 * every 1.5 s until anonymous RSS moved less than 0.5 MB twice in a row (at
 * most `timeoutMs`). After start-up both addons' hosts give back 8-14 MB in
 * their first ~8 s, which would otherwise count against the actors.
 */
export async function settledMemory(host, timeoutMs = 20_000) {
	const deadline = performance.now() + timeoutMs;
	let last = null;
	let steady = 0;
	for (;;) {
		await host.request("gc");
		const sample = await host.cpu();
		const anon = sample.rssAnonBytes ?? sample.rssBytes;
		steady = last !== null && Math.abs(anon - last) < 512 * 1024 ? steady + 1 : 0;
		last = anon;
		if (steady >= 2 || performance.now() > deadline) return sample;
		await sleep(1_500);
	}
}

/** The RSS host of one side; returns it, still running. */
async function rssPhase({ engine, stack, spec, options, out, log }) {
	const pool = `cmp-${spec.side}-rss-${process.pid}`;
	const prefix = `${spec.side}-rss-`;
	const client = newClient(engine, pool, options.encoding, stack);
	const host = await spawnSideHost({ engine, stack, spec, pool });
	try {
		await envoyRegistered(engine, pool, host);
		await host.ready;
		// One actor and action first, so that the baseline has the code of an action loaded.
		await client.counter.getOrCreate([`${prefix}warm`]).increment(1);
		const before = await settledMemory(host);
		const engineBeforeMs = processCpuMs(engine.pid);
		const woke = await run(
			{ total: options.actorsRss, inFlight: options.wakeInFlight, deadlineMs: options.rssDeadlineS * 1000 },
			(i) => wake(client, `${prefix}${i}`),
		);
		const engineWokeMs = processCpuMs(engine.pid);
		const woken = await host.cpu();
		const after = await settledMemory(host);
		// What the host uses while these actors sit idle (10 s).
		await sleep(10_000);
		const idle = await host.cpu();
		out.idleHostCpuMsPerS = (cpuMs(idle) - cpuMs(after)) / 10;
		const n = woke.latencies.length;
		out.rssActors = n;
		out.rssBeforeMb = before.rssBytes / (1024 * 1024);
		out.rssAfterMb = after.rssBytes / (1024 * 1024);
		out.rssPerActorKb = n ? (after.rssBytes - before.rssBytes) / 1024 / n : Number.NaN;
		out.anonPerActorKb = n ? (after.rssAnonBytes - before.rssAnonBytes) / 1024 / n : Number.NaN;
		out.filePerActorKb = n ? (after.rssFileBytes - before.rssFileBytes) / 1024 / n : Number.NaN;
		out.wakeCpuMsPerActor = n ? (cpuMs(woken) - cpuMs(before)) / n : Number.NaN;
		out.wakeEngineCpuMsPerActor = n ? (engineWokeMs - engineBeforeMs) / n : Number.NaN;
		out.wakeSeconds = woke.wallMs / 1000;
		if (woke.errors.length)
			out.notes.push(`${woke.errors.length} of ${options.actorsRss} wakes for RSS failed: ${woke.errors[0].message}`);
		if (n + woke.errors.length < options.actorsRss) {
			out.notes.push(
				`RSS wakes stopped at their ${options.rssDeadlineS} s deadline: ${n} of ${options.actorsRss} woken`,
			);
		}
		log(
			`${spec.label}: RSS ${fmt(out.rssBeforeMb)} → ${fmt(out.rssAfterMb)} MB after waking ${n} actors ` +
				`(in ${fmt(out.wakeSeconds)} s, ${woke.errors.length} errors)`,
		);
		await engineSettled(engine.pid);
		return host;
	} catch (err) {
		await host.kill();
		throw err;
	} finally {
		await client.dispose();
	}
}

const exitText = (exit, boundMs) =>
	!exit ? "-" : exit.timedOut ? `did not exit in ${boundMs / 1000} s` : fmt(exit.ms, 0);

/** ours / theirs; with a side that hit the bound, a bound on the ratio. */
function ratio(ours, theirs, { oursBound, theirsBound } = {}) {
	if (theirsBound && Number.isFinite(ours)) return `< ${fmt(ours / theirsBound, 3)}`;
	if (oursBound && Number.isFinite(theirs)) return `> ${fmt(oursBound / theirs, 2)}`;
	if (!Number.isFinite(ours) || !Number.isFinite(theirs) || theirs === 0) return "-";
	const r = ours / theirs;
	return fmt(r, Math.abs(r) < 0.1 ? 3 : 2);
}

/** The printed table and notes of `results`. */
function report(results, options, stack) {
	const t = results.theirs;
	const o = results.ours;
	const bound = options.exitBoundMs;
	const rows = [];
	const row = (figure, get, digits = 1) => {
		const tv = get(t) ?? Number.NaN;
		const ov = get(o) ?? Number.NaN;
		rows.push({ figure, theirs: fmt(tv, digits), ours: fmt(ov, digits), ratio: ratio(ov, tv) });
	};
	const n = (side, key) => side[key]?.ops ?? 0;
	row(`host CPU ms per HTTP action (${n(t, "http")} / ${n(o, "http")} sequential)`, (s) => s.http?.hostCpuMsPerOp, 3);
	row("HTTP action client p50 ms", (s) => s.http?.p50);
	row("HTTP action client p99 ms", (s) => s.http?.p99);
	row(`host CPU ms per WebSocket action (${n(t, "ws")} / ${n(o, "ws")} sequential)`, (s) => s.ws?.hostCpuMsPerOp, 3);
	row("WebSocket action client p50 ms", (s) => s.ws?.p50);
	row("WebSocket action client p99 ms", (s) => s.ws?.p99);
	row(`RSS KB per live actor (${t.rssActors ?? "-"} / ${o.rssActors ?? "-"} actors)`, (s) => s.rssPerActorKb);
	row(`process spawn → first answered action ms (median of ${options.startTrials})`, (s) => s.startMs, 0);
	/** SIGINT → exit with `count` live actors, the exits at `key`. */
	const exitRow = (count, key) =>
		rows.push({
			figure: `SIGINT → exit ms (${t[count] ?? "-"} / ${o[count] ?? "-"} live actors)`,
			theirs: exitText(t[key], bound),
			ours: exitText(o[key], bound),
			ratio: ratio(o[key]?.ms ?? Number.NaN, t[key]?.ms ?? Number.NaN, {
				theirsBound: t[key]?.timedOut ? bound : undefined,
				oursBound: o[key]?.timedOut ? bound : undefined,
			}),
		});
	exitRow("liveActors", "exit");
	exitRow("manyActors", "exitMany");
	rows.push({ figure: "for information:", theirs: "", ours: "", ratio: "" });
	row("  process spawn → envoy registered ms (median)", (s) => s.envoyMs, 0);
	rows.push({
		figure: "  each spawn → first answered action ms",
		theirs: (t.startTrialsMs ?? []).map((ms) => fmt(ms, 0)).join(" "),
		ours: (o.startTrialsMs ?? []).map((ms) => fmt(ms, 0)).join(" "),
		ratio: "",
	});
	row("  host RSS MB before the RSS actors", (s) => s.rssBeforeMb);
	row("  host RSS MB with them", (s) => s.rssAfterMb);
	row("  of the RSS per actor: anonymous KB", (s) => s.anonPerActorKb);
	row("  of the RSS per actor: file-backed KB", (s) => s.filePerActorKb);
	row("  host CPU ms per actor woken", (s) => s.wakeCpuMsPerActor, 2);
	row("  engine CPU ms per actor woken", (s) => s.wakeEngineCpuMsPerActor, 2);
	row("  seconds to wake them", (s) => s.wakeSeconds);
	row("  host CPU ms per s, idle with them (10 s)", (s) => s.idleHostCpuMsPerS, 2);
	row("  engine CPU ms per HTTP action", (s) => s.http?.engineCpuMsPerOp, 2);
	row("  engine CPU ms per WebSocket action", (s) => s.ws?.engineCpuMsPerOp, 2);

	const [theirs, ours] = stack.sides;
	const header = { figure: "figure", theirs: theirs.label, ours: ours.label, ratio: "ours / theirs" };
	const columns = Object.values(header);
	const text = table(
		columns,
		rows.map((r) => Object.fromEntries(Object.entries(header).map(([key, title]) => [title, r[key]]))),
	);
	const notes = [];
	for (const spec of stack.sides) {
		const out = results[spec.side];
		for (const note of out.notes) notes.push(`${spec.label}: ${note}`);
		for (const key of ["http", "ws"])
			if (out[key]?.firstError) notes.push(`${spec.label}: first ${key} error: ${out[key].firstError}`);
	}
	return { text: [text, ...notes].join("\n"), rows };
}

/**
 * Runs the comparison of `stack` (bench/lib/stacks.mjs; default RivetKit
 * 2.3.19) against `engine` (of that stack's engine version), logging
 * progress through `log`. Returns `{text, rows, results, failed}`: `text`
 * is the table (and notes), `rows` its rows (`{figure, theirs, ours,
 * ratio}`, formatted).
 */
export async function runComparison({ engine, stack = STACK_2_3, options = compareOptions(), log = console.log }) {
	const ours = ourAddonBinary();
	if (engine.arch && engine.arch !== stack.engineArch)
		throw new Error(`RivetKit ${stack.rivetkit} runs on engine ${stack.engineArch}, got ${engine.arch}`);
	log(`compare: ours = ${ours.description}`);
	log(
		`compare: rivetkit ${stack.rivetkit}, engine ${engine.version ?? "?"}; client encoding ${options.encoding}; ` +
			`one engine; actions measured in turns (${options.rounds} rounds)`,
	);
	const results = Object.fromEntries(stack.sides.map((spec) => [spec.side, { notes: [] }]));
	const idle = [];
	try {
		if (options.phases.includes("main")) await mainPhases({ engine, stack, options, ours, results, log });
		for (const spec of options.phases.includes("rss") ? stack.sides : []) {
			try {
				const idleBefore = await Promise.all(idle.map((h) => h.cpu()));
				const rssHost = await rssPhase({ engine, stack, spec, options, out: results[spec.side], log });
				rssHost.spec = spec;
				idle.push(rssHost);
				const idleAfter = await Promise.all(idle.slice(0, idleBefore.length).map((h) => h.cpu()));
				for (const [i, after] of idleAfter.entries()) {
					log(
						`compare: the idle ${idle[i].impl} host used ${fmt(cpuMs(after) - cpuMs(idleBefore[i]), 0)} ms of CPU meanwhile`,
					);
				}
			} catch (err) {
				results[spec.side].notes.push(`RSS phase failed: ${err.message}`);
				log(`compare: ${spec.label} RSS phase failed: ${err.stack ?? err.message}`);
			}
		}
		// The RSS hosts still hold their live actors: SIGINT → exit with
		// them, one side after the other.
		while (idle.length) {
			const host = idle.shift();
			const out = results[host.spec.side];
			out.manyActors = out.rssActors;
			out.exitMany = await sigintToExit(host, options.exitBoundMs);
			log(
				`${host.spec.label}: SIGINT with ${out.manyActors} live actors → ` +
					(out.exitMany.timedOut
						? `no exit within ${options.exitBoundMs / 1000} s (killed)`
						: `exit in ${fmt(out.exitMany.ms, 0)} ms`),
			);
		}
	} finally {
		await Promise.all(idle.map((host) => host.kill()));
	}
	const failed = stack.sides.some((spec) => {
		const out = results[spec.side];
		const mainFailed = options.phases.includes("main") && (!out.http || !out.ws || out.http.errors || out.ws.errors);
		return out.notes.some((n) => n.includes("phase failed:")) || mainFailed;
	});
	const { text, rows } = report(results, options, stack);
	return { text, rows, results, failed, build: ours.build };
}
