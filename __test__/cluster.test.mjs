// The engine cluster (docs/deploy.md): two engine nodes on one PostgreSQL
// database, talking over NATS (helpers/cluster.mjs), with hosts of the
// example app (rivetkit 2.3.19 on this addon) connected to different nodes
// of one pool, under load from the official client, and real faults: an
// engine node stopped or SIGKILLed (the leader and a host's own node), and
// NATS down for 10 s.
//
// Every fault checks that no answered increment is lost and no value is
// answered twice; a node lost (a host's own node SIGKILLed, the leader
// stopped) also checks that every actor stays in its generation: the host
// moves to the other node before the engine could declare it lost. The
// figures (failed requests, time until every counter answers again) are
// printed as diagnostics, never asserted; bench/engine-cluster.mjs prints
// them beside the reference's.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { createClient } from "rivetkit/client";

import { clusterHostEnv, interrupt, startApp, waitForOutput } from "./helpers/app.mjs";
import { startCluster } from "./helpers/cluster.mjs";
import { faultProxy } from "./helpers/fault-proxy.mjs";
import { ADMIN_TOKEN, NAMESPACE, upsertRunnerConfig, waitFor } from "./helpers/engine.mjs";
import { describeFigures, FAULTS, underLoad } from "./helpers/cluster-faults.mjs";

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

	const clientOn = (node, pool) =>
		createClient({ endpoint: node.endpoint, namespace: NAMESPACE, token: ADMIN_TOKEN, poolName: pool });

	/** A host of the example app whose envoy knows every node, `nodes[0]` first. */
	async function startHost(pool, name, nodes) {
		const app = startApp("src/server.mjs", clusterHostEnv(nodes, pool, ADMIN_TOKEN));
		app.name = name;
		apps.push(app);
		await waitForOutput(app, /registry serving/);
		return app;
	}

	/** How many times `key`'s counter woke, on any host: a new generation each. */
	const wakes = (key) => apps.reduce((n, app) => n + app.out.split(`counter ${key} awake`).length - 1, 0);

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

	test("one endpoint behind a load balancer: the host's node SIGKILLed, the host reconnects through it and keeps its actors", async (t) => {
		// A TCP proxy in front of the follower stands for the balancer; on the
		// node's death its health check sends new connections to the other.
		const leader = cluster.leader();
		const victim = cluster.nodes.find((n) => n !== leader);
		const balancer = await faultProxy(victim.ports.guard);
		t.after(async () => {
			await balancer.close();
			await victim.start();
		});
		const pool = "balanced";
		await upsertRunnerConfig(leader.endpoint, pool);
		const host = await startHost(pool, "balanced", [{ endpoint: balancer.url }]);
		const keys = Array.from({ length: 6 }, (_, i) => `balanced-${i}`);
		const client = clientOn(leader, pool);
		for (const key of keys) await client.counter.getOrCreate([key]).increment(1);
		const fault = {
			what: "the balanced host's node SIGKILLed",
			victim,
			via: leader,
			run: async () => {
				await victim.kill();
				balancer.retarget(leader.ports.guard);
			},
		};
		const figures = await underLoad({ client, keys, wakes, fault });
		t.diagnostic(describeFigures(figures, keys.length));
		assert.equal(figures.twice, 0, "no value answered twice");
		assert.equal(figures.lost, 0, "every answered increment is kept");
		assert.deepEqual(figures.moved, [], "every counter stays in its generation");
		await interrupt(host);
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
		 * Runs `fault` under load (helpers/cluster-faults.mjs), reports its
		 * figures and checks that nothing answered was lost or answered twice.
		 */
		async function faultUnderLoad(t, fault) {
			const figures = await underLoad({ client: clientOn(fault.via, pool), keys, wakes, fault });
			t.diagnostic(describeFigures(figures, keys.length));
			assert.equal(figures.twice, 0, "no value answered twice");
			assert.equal(figures.lost, 0, "every answered increment is kept");
			return figures;
		}

		/** Brings a stopped node back (a no-op if it runs). */
		const restart = (node) => node?.start();

		test("a host's own engine node SIGKILLed: the host moves to the other node and keeps its actors", async (t) => {
			const fault = FAULTS.hostNode(cluster);
			const host = hosts[cluster.nodes.indexOf(fault.victim)];
			const from = host.out.length;
			t.after(() => restart(fault.victim));
			const { moved } = await faultUnderLoad(t, fault);
			await waitForOutput(host, new RegExp(`websocket connected endpoint=${fault.via.endpoint}`), { from });
			assert.deepEqual(moved, [], "every counter stays in its generation, those of the host whose node died too");
		});

		test("the leader node stopped gracefully", async (t) => {
			const fault = FAULTS.leaderStop(cluster);
			t.after(() => restart(fault.victim));
			const { moved } = await faultUnderLoad(t, fault);
			assert.deepEqual(moved, [], "every counter stays in its generation");
		});

		test("the leader node SIGKILLed", async (t) => {
			await waitFor(() => cluster.leader(), { what: "a leader" });
			const fault = FAULTS.leaderKill(cluster);
			t.after(() => restart(fault.victim));
			await faultUnderLoad(t, fault);
		});

		test("NATS down for 10 s", async (t) => {
			t.after(() => cluster.nats.running || cluster.nats.start());
			await faultUnderLoad(t, FAULTS.natsDown(cluster));
		});
	});
});
