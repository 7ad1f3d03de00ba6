// The engine 3.0 cluster (docs/deploy.md, "An engine 3.0 cluster"): three
// engine 3.0 nodes sharing one S3 object store (moto_server), the storage
// partition provisioned over the three (helpers/cluster-3.mjs), and two
// hosts of the example app on rivetkit 3.0.0 (this addon) connected to
// different nodes of one pool, each knowing every node. Counters are
// incremented without pause through the official client while real faults
// hit the cluster, one after another on one cluster:
//
// (s) the object store down for 10 s (every connection to it reset, its
//     port refused): the hosts recover without a restart;
// (a) a host's own node SIGKILLed (not the partition holder): the host
//     moves to a live node;
// (b) the partition holder SIGKILLed (no host's own node): storage stops
//     until the engine grants the partition to another node.
// (c) it back, then the partition holder (now whichever node the engine
//     granted it to, perhaps the hosts' own) SIGTERMed: it hands the
//     partition over.
//
// Each checks that no answered increment is lost, no value is answered
// twice and every counter answers again. The figures (failed requests, time
// until every counter answers again, counters in a new generation) are
// diagnostics, never asserted.
//
// Not here: a host whose own node is the partition holder. In 2 of 4 runs
// here that host's counters never answered again after the holder's
// SIGKILL: the host moved to a live node and was registered there, but the
// engine kept sending its commands (the stops of the sleeps its actors
// asked for during the outage) to the dead node's api-peer address ("failed
// to send stop command; the stop timer resends it ... endpoint_unresolved"),
// so those actors stayed `stopping` and every request to them timed out
// (docs/deploy.md, "An engine 3.0 cluster").

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";

import { clientFor, clusterHostEnv, interrupt, startApp, waitForOutput } from "./helpers/app.mjs";
import { startCluster3 } from "./helpers/cluster-3.mjs";
import { describeFigures, underLoad } from "./helpers/cluster-faults.mjs";
import { ADMIN_TOKEN, NAMESPACE, upsertPool } from "./helpers/engine.mjs";

describe("engine 3.0 cluster", { concurrency: false }, () => {
	const pool = "cluster3";
	const keys = Array.from({ length: 8 }, (_, i) => `c3-${i}`);
	let cluster;
	let createClient;
	const apps = [];
	/** The partition holder, the node host a is connected to first, and the other (host b's, the clients'). */
	let holder;
	let plain;
	let spare;

	before(async () => {
		cluster = await startCluster3();
		createClient = await clientFor("3");
		holder = await cluster.holder();
		assert.ok(holder, "the engine names the node maintaining the storage partition");
		[plain, spare] = cluster.nodes.filter((n) => n !== holder);
		await upsertPool(holder.endpoint, pool);
		// Host a on one node that does not hold the partition, host b on the
		// other; each knows every node, the holder last.
		await startHost("a", [plain, spare, holder]);
		await startHost("b", [spare, plain, holder]);
		const client = clientOn(spare);
		for (const key of keys) assert.equal(await client.counter.getOrCreate([key]).increment(1), 1);
	});

	after(async () => {
		if (process.env.CLUSTER_DUMP) {
			const { writeFileSync } = await import("node:fs");
			for (const app of apps) writeFileSync(`${process.env.CLUSTER_DUMP}-${app.name}.log`, app.out);
		}
		for (const app of apps) if (!app.exited) await interrupt(app);
		await cluster?.stop();
	});

	const clientOn = (node) =>
		createClient({ endpoint: node.endpoint, namespace: NAMESPACE, token: ADMIN_TOKEN, poolName: pool });

	/** A host of the example app (rivetkit 3.0.0) whose envoy knows `nodes`, the first first. */
	async function startHost(name, nodes) {
		const app = startApp("src/server.mjs", clusterHostEnv(nodes, pool, ADMIN_TOKEN), { rivetkit: "3" });
		app.name = name;
		apps.push(app);
		await waitForOutput(app, /registry serving/);
		return app;
	}

	/** How many times `key`'s counter woke, on any host: a new generation each. */
	const wakes = (key) => apps.reduce((n, app) => n + app.out.split(`counter ${key} awake`).length - 1, 0);

	/** Runs `fault` under load through `via` and checks that nothing answered was lost or answered twice. */
	async function faultUnderLoad(t, fault, via = spare) {
		const figures = await underLoad({ client: clientOn(via), keys, wakes, fault: { via, ...fault } });
		t.diagnostic(describeFigures(figures, keys.length));
		assert.equal(figures.twice, 0, "no value answered twice");
		assert.equal(figures.lost, 0, "every answered increment is kept");
		return figures;
	}

	test("the object store down for 10 s: nothing is lost, the hosts recover without a restart", async (t) => {
		await faultUnderLoad(t, {
			what: "the object store down 10 s",
			run: async () => {
				await cluster.objectStore.stop();
				await sleep(10_000);
				await cluster.objectStore.start();
			},
		});
		for (const app of apps) assert.equal(app.exited, null, `host ${app.name} still up, never restarted`);
	});

	test("a host's own node SIGKILLed (not the partition holder): the host moves to a live node, nothing is lost", async (t) => {
		const [host] = apps;
		const from = host.out.length;
		await faultUnderLoad(t, { what: `host a's node (${plain.name}) SIGKILLed`, run: () => plain.kill() });
		await waitForOutput(host, /websocket connected endpoint=/, { from });
		t.diagnostic(`host a reconnected: ${/websocket connected endpoint=\S+/.exec(host.out.slice(from))?.[0]}`);
		await plain.start();
	});

	test("the partition holder SIGKILLed: storage comes back on another node, nothing is lost", async (t) => {
		await faultUnderLoad(t, { what: `the partition holder (${holder.name}) SIGKILLed`, run: () => holder.kill() });
		const now = await cluster.holder();
		t.diagnostic(`storage partition now maintained by ${now?.name ?? "an unknown worker"}`);
		assert.notEqual(now, holder, "the engine granted the partition to another node");
	});

	/** The node `app`'s envoy connected to last. */
	const nodeOf = (app) =>
		cluster.nodes.find(
			(n) => n.endpoint === [...app.out.matchAll(/websocket connected endpoint=(\S+?)\/? /g)].at(-1)?.[1],
		);

	test("the partition holder SIGTERMed: storage comes back on another node, nothing is lost", async (t) => {
		// The holder SIGKILLed above comes back first: three nodes again.
		await holder.start();
		const victim = await cluster.holder();
		const via = cluster.nodes.find((n) => n !== victim && n.running);
		t.diagnostic(
			`hosts on ${apps.map((app) => `${app.name}: ${nodeOf(app)?.name}`).join(", ")}; clients on ${via.name}`,
		);
		await faultUnderLoad(t, { what: `the partition holder (${victim.name}) SIGTERMed`, run: () => victim.stop() }, via);
		const now = await cluster.holder();
		t.diagnostic(`storage partition now maintained by ${now?.name ?? "an unknown worker"}`);
		assert.notEqual(now, victim, "the engine granted the partition to another node");
	});
});
