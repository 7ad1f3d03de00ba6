// The engine cluster (docs/deploy.md): two engine nodes on one PostgreSQL
// database, talking over NATS (helpers/cluster.mjs), with hosts of the
// example app (rivetkit 2.3.19 on this addon) connected to different nodes
// of one pool, under load from the official client, and real faults: an
// engine node stopped or SIGKILLed (the leader and a host's own node), and
// NATS down for 10 s.
//
// Every fault checks that no answered increment is lost and no value is
// answered twice; the one the addon can do something about (a host's own
// node lost) checks that the host's actors stay in their generation. The
// figures (failed requests, time until every counter answers again) are
// printed as diagnostics, never asserted.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";

import { createClient } from "rivetkit/client";

import { interrupt, startApp, waitForOutput } from "./helpers/app.mjs";
import { startCluster } from "./helpers/cluster.mjs";
import { ADMIN_TOKEN, NAMESPACE, upsertRunnerConfig, waitFor } from "./helpers/engine.mjs";
import { everyCounterAnswersAgain, load, tally } from "./helpers/counter-load.mjs";

describe("engine cluster", { concurrency: false }, () => {
	let cluster;
	const apps = [];

	before(async () => {
		// The engine's own lost threshold (15 s), not the single-node tests'
		// 7 s: a dead leader stalls the cluster's writes for up to its 10 s
		// lease, and a shorter threshold declares every host lost in it
		// (docs/deploy.md, "Thresholds").
		cluster = await startCluster({
			nodes: 2,
			env: { RIVET__PEGBOARD__ENVOY_LOST_THRESHOLD: "15000", RIVET__PEGBOARD__RUNNER_LOST_THRESHOLD: "15000" },
		});
	});

	after(async () => {
		if (process.env.CLUSTER_DUMP) {
			const { writeFileSync } = await import("node:fs");
			for (const app of apps) writeFileSync(`${process.env.CLUSTER_DUMP}-${app.name}.log`, app.out);
		}
		for (const app of apps) if (!app.exited) app.child.kill("SIGKILL");
		await cluster?.stop();
	});

	const clientOn = (node, pool) => createClient({ endpoint: node.endpoint, namespace: NAMESPACE, token: ADMIN_TOKEN, poolName: pool });

	/** A host of the example app whose envoy knows every node, `nodes[0]` first. */
	async function startHost(pool, name, nodes) {
		const app = startApp("src/server.mjs", {
			RIVET_ENDPOINT: nodes[0].endpoint,
			RIVETKIT_ENGINE_ENDPOINTS: nodes.slice(1).map((n) => n.endpoint).join(","),
			RIVET_TOKEN: ADMIN_TOKEN,
			RIVET_POOL: pool,
			RIVET_EXPOSE_ERRORS: "1",
			// The envoy client's own lines name the node it connects to.
			RIVET_LOG_LEVEL: process.env.CLUSTER_LOG ?? "info,rivet_envoy_client=info",
		});
		app.name = name;
		apps.push(app);
		await waitForOutput(app, /registry serving/);
		return app;
	}

	/** How many times `key`'s counter woke, on any host: a new generation each. */
	const wakes = (key) => apps.reduce((n, app) => n + app.out.split(`counter ${key} awake`).length - 1, 0);

	/**
	 * After a fault at `at` (ms): requests that failed since, and how long
	 * until the last of `keys` answered again.
	 */
	function figures(traffic, keys, failures, at) {
		const back = keys.map((k) => traffic.answeredAt.get(k).find((t) => t > at) ?? Infinity);
		return { failed: failures.length, backAfterMs: Math.max(...back) - at };
	}

	/** Asserts that no value was answered twice and nothing answered was lost. */
	async function noneLost(client, answered) {
		const { twice, lost } = await tally(client, answered);
		assert.equal(twice, 0, "no value answered twice");
		assert.equal(lost, 0, "every answered increment is kept");
	}

	test("hosts on different nodes serve one pool, and clients on either node reach every actor", async (t) => {
		const [n1, n2] = cluster.nodes;
		const pool = "spread";
		await upsertRunnerConfig(n1.endpoint, pool);
		const a = await startHost(pool, "spread-a", [n1, n2]);
		const b = await startHost(pool, "spread-b", [n2, n1]);
		const [c1, c2] = [clientOn(n1, pool), clientOn(n2, pool)];
		const keys = Array.from({ length: 8 }, (_, i) => `spread-${i}`);
		for (const key of keys) {
			assert.equal(await c1.counter.getOrCreate([key]).increment(1), 1);
			assert.equal(await c2.counter.getOrCreate([key]).increment(1), 2, `${key} through the other node`);
			assert.equal(await c1.counter.getOrCreate([key]).getCount(), 2);
		}
		const on = (app) => keys.filter((k) => app.out.includes(`counter ${k} awake`)).length;
		t.diagnostic(`counters on the host of node 1: ${on(a)}, on the host of node 2: ${on(b)}`);
		assert.equal(on(a) + on(b), keys.length, "every counter woke once");
		for (const h of [a, b]) await interrupt(h);
	});

	describe("faults under load", { concurrency: false }, () => {
		const pool = "faults";
		const keys = Array.from({ length: 12 }, (_, i) => `fault-${i}`);
		let hosts;

		before(async () => {
			const [n1, n2] = cluster.nodes;
			await upsertRunnerConfig(n1.endpoint, pool);
			hosts = [await startHost(pool, "fault-a", [n1, n2]), await startHost(pool, "fault-b", [n2, n1])];
			const client = clientOn(n1, pool);
			for (const key of keys) await client.counter.getOrCreate([key]).increment(1);
		});

		after(async () => {
			for (const h of hosts ?? []) if (!h.exited) await interrupt(h);
		});

		/**
		 * Runs the load through `via`, applies `fault`, waits until every
		 * counter answers again, then checks and reports.
		 */
		async function underLoad(t, what, via, fault) {
			const client = clientOn(via, pool);
			const traffic = load(client, { keys, workers: 6 });
			await waitFor(() => traffic.count >= 100, { timeoutMs: 60_000, what: "load warmed up" });
			const wakesBefore = new Map(keys.map((k) => [k, wakes(k)]));
			const at = Date.now();
			await fault();
			await everyCounterAnswersAgain(traffic, keys, `after ${what}`);
			// A little more load on the healed cluster.
			const settled = traffic.count;
			await waitFor(() => traffic.count >= settled + 50, { timeoutMs: 60_000, what: `load after ${what}` });
			const { answered, failures } = await traffic.stop();
			const moved = keys.filter((k) => wakes(k) > wakesBefore.get(k));
			const { failed, backAfterMs } = figures(traffic, keys, failures, at);
			t.diagnostic(
				`${what}: ${traffic.count} increments answered, ${failed} failed ` +
					`(${[...new Set(failures.map((f) => f.code))].join(", ") || "none"}), every counter answering again ` +
					`${backAfterMs} ms after the fault, ${moved.length} of ${keys.length} counters in a new generation`,
			);
			await noneLost(client, answered);
			return { moved, failed, backAfterMs };
		}

		/** Brings a stopped node back and waits until both hosts are connected. */
		async function restart(node) {
			await node.start();
			await sleep(500);
		}

		test("a host's own engine node SIGKILLed: the host moves to the other node and keeps its actors", async (t) => {
			// The follower, so that no write stalls on the leader lease.
			const leader = cluster.leader();
			const victim = cluster.nodes.find((n) => n !== leader);
			const survivor = leader;
			const host = hosts[cluster.nodes.indexOf(victim)];
			const from = host.out.length;
			const onHost = keys.filter((k) => host.out.includes(`counter ${k} awake`));
			t.after(() => restart(victim));
			const { moved } = await underLoad(t, "a host's node SIGKILLed", survivor, () => victim.kill());
			await waitForOutput(host, new RegExp(`websocket connected endpoint=${survivor.endpoint}`), { from });
			assert.deepEqual(
				moved.filter((k) => onHost.includes(k)),
				[],
				`the counters of the host whose node died stay in their generation (${onHost.length} on it)`,
			);
		});

		test("the leader node stopped gracefully", async (t) => {
			const leader = cluster.leader();
			const other = cluster.nodes.find((n) => n !== leader);
			t.after(() => restart(leader));
			await underLoad(t, "the leader stopped (SIGTERM)", other, () => leader.stop());
		});

		test("the leader node SIGKILLed", async (t) => {
			const leader = await waitFor(() => cluster.leader(), { what: "a leader" });
			const other = cluster.nodes.find((n) => n !== leader);
			t.after(() => restart(leader));
			await underLoad(t, "the leader SIGKILLed", other, () => leader.kill());
		});

		test("NATS down for 10 s", async (t) => {
			t.after(() => cluster.nats.running || cluster.nats.start());
			await underLoad(t, "NATS down 10 s", cluster.nodes[0], async () => {
				await cluster.nats.stop();
				await sleep(10_000);
				await cluster.nats.start();
			});
		});
	});
});
