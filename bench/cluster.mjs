// The cluster scenarios side by side (`node bench/cluster.mjs`, part of
// `npm run bench`; BENCH_CLUSTER=0 skips it, "only" runs nothing else): the
// RivetKit app of bench/apps/rivetkit-app.mjs on @rivetkit/rivetkit-napi@2.3.19
// ("theirs") and on rivetkit-native ("ours", installed under the
// reference's name: bench/lib/rivetkit-alias.mjs), several hosts in one
// pool of one private engine (envoy lost threshold 8 s, as in
// __test__/cluster-safety.test.mjs), under continuous load from the
// official client (__test__/helpers/counter-load.mjs):
//
//   rolling    3 hosts, 30 counters over HTTP and 3 over WebSocket; each
//              host in turn is replaced (a new one starts, then the old one
//              gets SIGINT): failed requests, the longest stall, values
//              answered twice, increments lost, WebSocket closes
//   sigkill    3 hosts, 12 counters; one host SIGKILLed: requests failed
//              while it was gone, time until every counter answered again,
//              increments lost
//   partition  host A reaches the engine through a TCP proxy that holds its
//              bytes for 20 s (longer than the lost threshold), host B
//              directly; 6 counters that started on A: increments lost,
//              values answered twice
//   gate       ours only, the output gate (docs/durability.md) off and on:
//              client p50/p99 of sequential HTTP increments of one counter
//              and of 16 concurrent ones, and the engine KV requests the host
//              sent for that counter per action (from the envoy client's
//              debug log)
//
// Actor keys are per namespace, not per pool: each side's counters have
// keys of their own (the pool name), or the second side would wake the
// first side's actors in a pool with no host left.
//
// Knobs: BENCH_CLUSTER_SCENARIOS=rolling,sigkill,partition,gate,
// BENCH_CLUSTER_IMPLS=rivetkit-napi,rivetkit-native, BENCH_GATE_ACTIONS=300,
// BENCH_PARTITION_MS=20000 (how long the partition holds bytes; 12000 ends
// it after the host's lease but before the engine's own ping timeout).
// About 5 minutes on 2 cores.

import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";

import { createClient } from "rivetkit/client";

import { everyCounterAnswersAgain, load, tally } from "../__test__/helpers/counter-load.mjs";
import { startEngine, waitFor } from "../__test__/helpers/engine.mjs";
import { faultProxy } from "../__test__/helpers/fault-proxy.mjs";
import { sigintToExit } from "./compare.mjs";
import { spawnHost } from "./lib/host.mjs";
import { fmt, table } from "./lib/stats.mjs";

const LOST_THRESHOLD_MS = 8_000;
const PARTITION_MS = Number(process.env.BENCH_PARTITION_MS ?? LOST_THRESHOLD_MS + 12_000);
const NAMES = { "rivetkit-napi": "theirs", "rivetkit-native": "ours" };
const read = (handle) => handle.get();

export const clusterOptions = () => ({
	scenarios: (process.env.BENCH_CLUSTER_SCENARIOS ?? "rolling,sigkill,partition,gate").split(","),
	impls: (process.env.BENCH_CLUSTER_IMPLS ?? "rivetkit-napi,rivetkit-native").split(","),
	gateActions: Number(process.env.BENCH_GATE_ACTIONS ?? 300),
});

/** Every host spawned, so that a failed run leaves none behind. */
const spawned = new Set();

/** A host of the bench app on `pool`, ready. */
async function host(engine, impl, pool, { endpoint = engine.endpoint, env = {}, captureStderr = false } = {}) {
	const h = spawnHost({ impl, endpoint, pool, token: engine.token, env, captureStderr });
	spawned.add(h);
	h.exited.then(() => spawned.delete(h));
	await h.ready;
	return h;
}

/** SIGINT, then the exit (SIGKILL past 30 s); true if it exited by itself. */
const interrupt = async (h) => !(await sigintToExit(h, 30_000)).timedOut;

async function rolling(engine, client, impl, pool) {
	let hosts = [];
	for (let i = 0; i < 3; i++) hosts.push(await host(engine, impl, pool));
	const keys = Array.from({ length: 30 }, (_, i) => `${pool}-${i}`);
	const wsKeys = [0, 1, 2].map((i) => `${pool}-ws-${i}`);
	const traffic = load(client, { keys, wsKeys });
	await waitFor(() => traffic.count >= 200, { timeoutMs: 60_000, what: "load warmed up" });
	let selfExits = 0;
	for (const old of [...hosts]) {
		const fresh = await host(engine, impl, pool);
		if (await interrupt(old)) selfExits++;
		hosts = hosts.map((h) => (h === old ? fresh : h));
		const before = traffic.count;
		await waitFor(() => traffic.count >= before + 100, { timeoutMs: 90_000, what: "load after the replacement" });
	}
	const { answered, failures, closes, longestStall } = await traffic.stop();
	const { lost, twice } = await tally(client, answered, read);
	for (const h of hosts) await interrupt(h);
	return {
		answered: traffic.count,
		failed: failures.length,
		longestStall,
		twice,
		lost,
		closes: closes.length,
		selfExits,
		errors: summary(failures),
	};
}

async function sigkill(engine, client, impl, pool) {
	const hosts = [];
	for (let i = 0; i < 3; i++) hosts.push(await host(engine, impl, pool));
	const keys = Array.from({ length: 12 }, (_, i) => `${pool}-${i}`);
	const traffic = load(client, { keys });
	await waitFor(() => traffic.count >= 200, { timeoutMs: 60_000, what: "load warmed up" });
	const killedAt = Date.now();
	hosts[1].child.kill("SIGKILL");
	await hosts[1].exited;
	await everyCounterAnswersAgain(traffic, keys, "after the kill");
	const recovered = Date.now() - killedAt;
	const { answered, failures, longestStall } = await traffic.stop();
	const { lost, twice } = await tally(client, answered, read);
	for (const h of [hosts[0], hosts[2]]) await interrupt(h);
	return {
		answered: traffic.count,
		failed: failures.length,
		recoveredMs: recovered,
		longestStall,
		twice,
		lost,
		errors: summary(failures),
	};
}

async function partition(engine, client, impl, pool) {
	const proxy = await faultProxy(engine.guardPort);
	const a = await host(engine, impl, pool, { endpoint: proxy.url });
	const keys = Array.from({ length: 6 }, (_, i) => `${pool}-${i}`);
	const first = new Map();
	for (const key of keys) first.set(key, await client.counter.getOrCreate([key]).increment(1));
	const b = await host(engine, impl, pool);
	const traffic = load(client, { keys });
	for (const key of keys) traffic.answered.get(key).unshift(first.get(key));
	await waitFor(() => traffic.count >= 100, { timeoutMs: 60_000, what: "load warmed up" });
	proxy.hold();
	await sleep(PARTITION_MS);
	proxy.release();
	await everyCounterAnswersAgain(traffic, keys, "after the heal");
	const { answered, failures, longestStall } = await traffic.stop();
	const { lost, twice } = await tally(client, answered, read);
	for (const h of [a, b]) await interrupt(h);
	await proxy.close();
	return { answered: traffic.count, failed: failures.length, longestStall, twice, lost, errors: summary(failures) };
}

/** Ours with the output gate off, then on: latency and KV requests per action. */
async function gate(engine, options) {
	const rows = [];
	for (const [label, value] of [
		["gate off", "0"],
		["gate on", "1"],
	]) {
		const pool = `gate-${value}`;
		const h = await host(engine, "rivetkit-native", pool, {
			env: { RIVETKIT_OUTPUT_GATE: value, RIVET_LOG_LEVEL: "warn,rivet_envoy_client::connection=debug" },
			captureStderr: true,
		});
		const gateClient = createClient({
			endpoint: engine.endpoint,
			namespace: engine.namespace,
			token: engine.token,
			poolName: pool,
		});
		const created = gateClient.counter.getOrCreate([`gate-${value}`]);
		await created.increment(1);
		const actorId = await created.resolve();
		// By id: gateway path routing, no key query per request.
		const handle = gateClient.counter.getForId(actorId);
		const requests = () => h.stderr().split(`ToRivetKvRequest{actorId: \\"${actorId}\\"`).length - 1;
		for (const [shape, inFlight] of [
			["sequential", 1],
			["16 concurrent", 16],
		]) {
			const before = requests();
			const latencies = [];
			let next = 0;
			await Promise.all(
				Array.from({ length: inFlight }, async () => {
					while (next++ < options.gateActions) {
						const t = performance.now();
						await handle.increment(1);
						latencies.push(performance.now() - t);
					}
				}),
			);
			// The throttled save of the last actions (gate off) lands within
			// `stateSaveInterval` (1 s): wait for it before counting.
			await sleep(1_500);
			latencies.sort((x, y) => x - y);
			rows.push({
				"": `${label}, ${shape}`,
				p50: fmt(latencies[Math.floor(latencies.length / 2)]),
				p99: fmt(latencies[Math.floor(latencies.length * 0.99)]),
				"KV requests / action": fmt((requests() - before) / latencies.length, 2),
			});
		}
		await gateClient.dispose?.();
		await interrupt(h);
	}
	return rows;
}

/** The failures' codes with their counts, e.g. "guard.x 2, actor.y 1". */
const summary = (failures) => {
	const by = new Map();
	for (const f of failures) by.set(f.code, (by.get(f.code) ?? 0) + 1);
	return [...by].map(([code, n]) => `${code} ${n}`).join(", ") || "-";
};

export async function runCluster({ options = clusterOptions(), log = console.log } = {}) {
	// Engine 2.3.19, as when this was written (the harness's default is now 3.0).
	const engine = await startEngine({
		arch: "v2",
		env: {
			RIVET__PEGBOARD__ENVOY_LOST_THRESHOLD: String(LOST_THRESHOLD_MS),
			RIVET__PEGBOARD__ENVOY_ELIGIBLE_THRESHOLD: "5000",
		},
	});
	try {
		const scenarios = { rolling, sigkill, partition };
		const results = {};
		for (const name of options.scenarios.filter((s) => s in scenarios)) {
			results[name] = {};
			for (const impl of options.impls) {
				const pool = `${name}-${NAMES[impl] ?? impl}`;
				const client = createClient({
					endpoint: engine.endpoint,
					namespace: engine.namespace,
					token: engine.token,
					poolName: pool,
				});
				log(`cluster: ${name} on ${NAMES[impl] ?? impl} ...`);
				results[name][impl] = await scenarios[name](engine, client, impl, pool);
				await client.dispose?.();
			}
			const fields = Object.keys(Object.values(results[name])[0]);
			log(`\ncluster: ${name}`);
			const columns = ["", ...options.impls.map((i) => NAMES[i] ?? i)];
			log(
				table(
					columns,
					fields.map((f) =>
						Object.fromEntries([["", f], ...options.impls.map((i) => [NAMES[i] ?? i, results[name][i][f]])]),
					),
				),
			);
		}
		if (options.scenarios.includes("gate")) {
			log("cluster: output gate ...");
			const rows = await gate(engine, options);
			log("\noutput gate (ours): client latency (ms) and engine KV requests per action");
			log(table(["", "p50", "p99", "KV requests / action"], rows));
		}
		return results;
	} finally {
		for (const h of spawned) h.child.kill("SIGKILL");
		await engine.stop();
	}
}

if (process.argv[1] === fileURLToPath(import.meta.url)) await runCluster();
