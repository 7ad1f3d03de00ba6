// The engine-cluster faults side by side (`node bench/engine-cluster.mjs`,
// part 4 of `npm run bench`; BENCH_ENGINE_CLUSTER=0 skips it, "only" runs
// nothing else): a two-node engine on PostgreSQL and NATS
// (__test__/helpers/cluster.mjs, engine lost threshold 15 s), two hosts of
// the bench app in one pool, host A on node 1 and host B on node 2, 12
// counters incremented without pause through the node that survives; then
// each fault of __test__/helpers/cluster-faults.mjs in turn: a host's node
// SIGKILLed, the leader stopped, the leader SIGKILLed, NATS down 10 s.
//
// The reference accepts one endpoint: each of its hosts knows only its own
// node. Ours get both (`RIVETKIT_ENGINE_ENDPOINTS`, docs/deploy.md). A fresh
// cluster per side. Needs PostgreSQL and NATS (`npm install` installs them
// on Debian). About 4 minutes on 2 cores.
//
// Knobs: BENCH_ENGINE_CLUSTER_IMPLS=rivetkit-napi,rivetkit-native.

import { fileURLToPath } from "node:url";

import { createClient } from "rivetkit/client";

import { FAULTS, underLoad } from "../__test__/helpers/cluster-faults.mjs";
import { clusterAvailable, startCluster } from "../__test__/helpers/cluster.mjs";
import { ADMIN_TOKEN, NAMESPACE, upsertRunnerConfig } from "../__test__/helpers/engine.mjs";
import { sigintToExit } from "./compare.mjs";
import { spawnHost } from "./lib/host.mjs";
import { fmt, table } from "./lib/stats.mjs";

const NAMES = { "rivetkit-napi": "theirs", "rivetkit-native": "ours" };
const FAULT_ORDER = ["hostNode", "leaderStop", "leaderKill", "natsDown"];
const KEYS = Array.from({ length: 12 }, (_, i) => `engine-cluster-${i}`);
const read = (handle) => handle.get();

export const engineClusterOptions = () => ({
	impls: (process.env.BENCH_ENGINE_CLUSTER_IMPLS ?? "rivetkit-napi,rivetkit-native").split(","),
});

/** One side: a fresh cluster, two hosts, every fault; resolves to the figures by fault. */
async function side(impl, log) {
	const cluster = await startCluster({
		nodes: 2,
		env: { RIVET__PEGBOARD__ENVOY_LOST_THRESHOLD: "15000", RIVET__PEGBOARD__RUNNER_LOST_THRESHOLD: "15000" },
	});
	const hosts = [];
	try {
		const pool = `engine-cluster-${NAMES[impl] ?? impl}`;
		await upsertRunnerConfig(cluster.nodes[0].endpoint, pool);
		for (const [own, other] of [cluster.nodes, [...cluster.nodes].reverse()]) {
			const env = { BENCH_LOG_WAKES: "1" };
			if (impl === "rivetkit-native") env.RIVETKIT_ENGINE_ENDPOINTS = other.endpoint;
			const h = spawnHost({ impl, endpoint: own.endpoint, pool, token: ADMIN_TOKEN, env, captureStderr: true });
			hosts.push(h);
			await h.ready;
		}
		const wakes = (key) => hosts.reduce((n, h) => n + h.stderr().split(`counter ${key} awake`).length - 1, 0);
		const clientOn = (node) =>
			createClient({ endpoint: node.endpoint, namespace: NAMESPACE, token: ADMIN_TOKEN, poolName: pool });
		const warm = clientOn(cluster.nodes[0]);
		for (const key of KEYS) await warm.counter.getOrCreate([key]).increment(1);
		const results = {};
		for (const name of FAULT_ORDER) {
			const fault = FAULTS[name](cluster);
			log(`engine cluster: ${fault.what} on ${NAMES[impl] ?? impl} ...`);
			const client = clientOn(fault.via);
			results[name] = await underLoad({ client, keys: KEYS, wakes, fault, read });
			await client.dispose?.();
			await fault.victim?.start();
			if (!cluster.nats.running) await cluster.nats.start();
		}
		for (const h of hosts) await sigintToExit(h, 30_000);
		return results;
	} finally {
		for (const h of hosts) h.child.kill("SIGKILL");
		await cluster.stop();
	}
}

export async function runEngineCluster({ options = engineClusterOptions(), log = console.log } = {}) {
	const missing = clusterAvailable();
	if (missing.length) {
		log(`engine cluster: skipped, ${missing.join(" and ")} missing (npm install installs them on Debian)`);
		return null;
	}
	const results = {};
	for (const impl of options.impls) results[impl] = await side(impl, log);
	const columns = ["", ...options.impls.map((i) => NAMES[i] ?? i)];
	for (const name of FAULT_ORDER) {
		const first = results[options.impls[0]][name];
		log(`\nengine cluster: ${first.what}`);
		const rows = [
			["failed requests", (f) => `${f.failed}`],
			["every counter answering again, ms", (f) => fmt(f.backAfterMs)],
			["counters in a new generation (of 12)", (f) => `${f.moved.length}`],
			["increments lost", (f) => `${f.lost}`],
			["values answered twice", (f) => `${f.twice}`],
			["increments answered", (f) => `${f.answered}`],
			["errors", (f) => f.codes],
		];
		log(
			table(
				columns,
				rows.map(([label, get]) =>
					Object.fromEntries([["", label], ...options.impls.map((i) => [NAMES[i] ?? i, get(results[i][name])])]),
				),
			),
		);
	}
	return results;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) await runEngineCluster();
