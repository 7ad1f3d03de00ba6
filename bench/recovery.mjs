// Recovery after a host crash: how long the actors of a SIGKILLed host stay
// unreachable when a fresh host of the same pool is started at once.
//
//   node bench/recovery.mjs
//
// Each trial: every actor has acknowledged state (an `increment` that saved
// it), the current host gets SIGKILL, a new host of the same pool is
// spawned right away, and two clients per actor start at the kill (path
// routing by actor id):
// - a polling client asks `get` with a short timeout per attempt
//   (RECOVERY_ATTEMPT_MS, default 1000) until the actor answers with the
//   state it acknowledged: when the actor is back;
// - a patient client sends one `get` and waits for whatever the gateway
//   answers (retrying only after an error answer): what a client that does
//   not time out sees.
// Printed per trial and over all trials: the time from the kill until
// each actor answered (min / median / max) for both clients, when the new
// host was serving, and how many answers had a wrong state (must be 0).
//
// The engine (RECOVERY_ENGINE):
//   embedded  (default) the first host starts it itself (`engineSpawn:
//             "auto"` on a free private port, storage in a temporary
//             RIVETKIT_STORAGE_PATH), so its lost-envoy settings are exactly
//             what crates/core/src/engine/plan.rs gives an engine we spawn;
//             the engine outlives the killed host, as it does for users.
//   harness   the test harness's engine (__test__/helpers/engine.mjs) with
//             RECOVERY_ENGINE_ENV (JSON object of RIVET__* variables) on top,
//             to compare settings without rebuilding the addon, e.g.
//             RECOVERY_ENGINE_ENV='{"RIVET__PEGBOARD__ENVOY_LOST_THRESHOLD":"15000"}'.
//
// The host (RECOVERY_HOST, bench/lib/host.mjs): native (default), or
// rivetkit-napi / rivetkit-native (the RivetKit app of bench/apps, on the
// reference addon or on ours; harness engine only, as RivetKit would start
// its own engine). RivetKit saves state on an interval, not before an
// action answers, so for those hosts the trial waits RECOVERY_SETTLE_MS
// (default 2000) between the increments and the kill.
//
// Options: RECOVERY_ACTORS=10, RECOVERY_TRIALS=3, RECOVERY_ATTEMPT_MS=1000,
// RECOVERY_TIMEOUT_MS=90000 (per trial), BENCH_ADDON (another build's
// index.js).

import { readdirSync, readFileSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { findFreePorts, gatewayFetch, getOrCreateActor, startEngine, waitFor } from "../__test__/helpers/engine.mjs";
import { spawnHost } from "./lib/host.mjs";
import { int } from "./lib/knobs.mjs";
import { fmt, percentile, table } from "./lib/stats.mjs";

const host = process.env.RECOVERY_HOST ?? "native";
const options = {
	host,
	settleMs: Number.parseInt(process.env.RECOVERY_SETTLE_MS ?? (host === "native" ? "0" : "2000"), 10),
	engine: process.env.RECOVERY_ENGINE ?? (host === "native" ? "embedded" : "harness"),
	engineEnv: JSON.parse(process.env.RECOVERY_ENGINE_ENV ?? "{}"),
	actors: int("RECOVERY_ACTORS", 10),
	trials: int("RECOVERY_TRIALS", 3),
	attemptMs: int("RECOVERY_ATTEMPT_MS", 1_000),
	timeoutMs: int("RECOVERY_TIMEOUT_MS", 90_000),
};
const POOL = "recovery-bench";

/** One `counter` action through the gateway; resolves to the decoded count. */
async function action(endpoint, actorId, name, timeoutMs) {
	const res = await gatewayFetch(endpoint, actorId, `/action/${name}`, {
		method: "POST",
		headers: { "x-rivet-encoding": "json", "content-type": "application/json" },
		body: JSON.stringify({ args: [1] }),
		signal: AbortSignal.timeout(timeoutMs),
	});
	const text = await res.text();
	if (res.status !== 200) throw new Error(`${name}: status ${res.status}: ${text.slice(0, 200)}`);
	return JSON.parse(text).output;
}

/** Pids of engines started with the config file of `port` under `storage`. */
function embeddedEnginePids(storage) {
	const pids = [];
	for (const entry of readdirSync("/proc")) {
		if (!/^\d+$/.test(entry)) continue;
		try {
			const cmdline = readFileSync(`/proc/${entry}/cmdline`, "utf8");
			if (cmdline.includes("rivet-engine") && cmdline.includes(storage)) pids.push(Number(entry));
		} catch {}
	}
	return pids;
}

/** The engine: `{endpoint, hostEnv, stop, describe}`. */
async function engineFor(mode) {
	if (mode === "harness") {
		const engine = await startEngine({ env: { RUST_BACKTRACE: "0", ...options.engineEnv } });
		return {
			endpoint: engine.endpoint,
			token: engine.token,
			hostEnv: {},
			stop: () => engine.stop(),
			describe: `harness engine, extra env ${JSON.stringify(options.engineEnv)}`,
		};
	}
	const { guard } = await findFreePorts();
	const storage = mkdtempSync(join(tmpdir(), "rivetkit-native-recovery-"));
	return {
		endpoint: `http://127.0.0.1:${guard}`,
		hostEnv: { BENCH_ENGINE_SPAWN: "auto", RIVETKIT_STORAGE_PATH: storage },
		async stop() {
			for (const pid of embeddedEnginePids(storage)) {
				try {
					process.kill(pid, "SIGTERM");
				} catch {}
				await waitFor(() => embeddedEnginePids(storage).length === 0, { timeoutMs: 10_000, what: "engine exit" }).catch(
					() => process.kill(pid, "SIGKILL"),
				);
			}
			rmSync(storage, { recursive: true, force: true });
		},
		describe: "embedded engine (the settings of crates/core/src/engine/plan.rs)",
	};
}

/**
 * Asks `get` until it answers, each attempt bounded by `attemptMs`;
 * resolves to `{ms, count, errors}` (time from `t0`, error answers seen).
 */
async function untilAnswered(endpoint, actorId, t0, deadline, attemptMs) {
	let lastError;
	let errors = 0;
	while (performance.now() < deadline) {
		try {
			const left = Math.max(1, Math.ceil(deadline - performance.now()));
			const count = await action(endpoint, actorId, "get", Math.min(left, attemptMs));
			return { ms: performance.now() - t0, count, errors };
		} catch (err) {
			lastError = err;
			if (err.name !== "TimeoutError") errors++;
			await new Promise((r) => setTimeout(r, 50));
		}
	}
	throw new Error(`actor ${actorId} did not answer within ${options.timeoutMs} ms: ${lastError?.message}`);
}

const spreadColumns = (name) => [`${name} min`, `${name} median`, `${name} max`];

/** `{<name> min, <name> median, <name> max}` of `values`, formatted. */
function spread(values, name) {
	const sorted = [...values].sort((a, b) => a - b);
	const [min, median, max] = spreadColumns(name);
	return { [min]: fmt(sorted[0], 0), [median]: fmt(percentile(sorted, 50), 0), [max]: fmt(sorted.at(-1), 0) };
}

let engine = null;

async function main() {
	engine = await engineFor(options.engine);
	if (options.host !== "native" && options.engine !== "harness")
		throw new Error("RivetKit hosts need RECOVERY_ENGINE=harness");
	const spawn = () =>
		spawnHost({ impl: options.host, endpoint: engine.endpoint, token: engine.token, pool: POOL, env: engine.hostEnv });
	let host = null;
	const rows = [];
	const all = { polling: [], patient: [] };
	try {
		console.error(
			`recovery: ${options.host} host, ${engine.describe}, ${options.actors} actors, ${options.trials} trials`,
		);
		host = spawn();
		await host.ready;
		const actors = [];
		for (let i = 0; i < options.actors; i++) {
			const { actor } = await getOrCreateActor(engine.endpoint, { name: "counter", key: `recovery-${i}`, pool: POOL });
			actors.push({ id: actor.actor_id, count: 0 });
		}
		for (let trial = 1; trial <= options.trials; trial++) {
			// Acknowledged state: `increment` answers after its save is done.
			for (const actor of actors) actor.count = await action(engine.endpoint, actor.id, "increment", 60_000);
			await new Promise((r) => setTimeout(r, options.settleMs));

			const t0 = performance.now();
			await host.kill();
			host = spawn();
			const ready = host.ready.then(({ at }) => at - t0);
			const deadline = t0 + options.timeoutMs;
			const clients = (attemptMs) =>
				Promise.all(actors.map((a) => untilAnswered(engine.endpoint, a.id, t0, deadline, attemptMs)));
			const [polling, patient] = await Promise.all([clients(options.attemptMs), clients(options.timeoutMs)]);
			const wrong = [...polling, ...patient].filter((a, i) => a.count !== actors[i % actors.length].count).length;
			const errors = patient.reduce((n, a) => n + a.errors, 0);
			all.polling.push(...polling.map((a) => a.ms));
			all.patient.push(...patient.map((a) => a.ms));
			rows.push({
				trial: String(trial),
				serving: fmt(await ready, 0),
				...spread(
					polling.map((a) => a.ms),
					"polling",
				),
				...spread(
					patient.map((a) => a.ms),
					"patient",
				),
				"patient errors": String(errors),
				"wrong state": String(wrong),
			});
			console.error(`trial ${trial}: ${JSON.stringify(rows.at(-1))}`);
		}
		rows.push({ trial: "all", ...spread(all.polling, "polling"), ...spread(all.patient, "patient") });
		console.log(
			`\nSIGKILL → every actor answers again, ms (${options.host} host, ${engine.describe}, ${options.actors} actors;`,
		);
		console.log(
			`polling: ${options.attemptMs} ms per attempt; patient: one request, retried only after an error answer)\n`,
		);
		console.log(
			table(
				["trial", "serving", ...spreadColumns("polling"), ...spreadColumns("patient"), "patient errors", "wrong state"],
				rows,
			),
		);
	} finally {
		await host?.stop(10_000).catch(() => {});
		await engine.stop();
	}
}

// Hosts are our children and get a terminal's signal themselves; the
// engine runs in its own process group: stop it before leaving.
for (const signal of ["SIGINT", "SIGTERM"]) {
	process.once(signal, async () => {
		await engine?.stop().catch(() => {});
		process.exit(130);
	});
}

await main();
