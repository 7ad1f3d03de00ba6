// State that survives: across a graceful restart of the host process and
// across a SIGKILL of the host after the save was acknowledged.

import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { after, before, test } from "node:test";

import { createActor, gatewayFetch, spawnHost, startEngine, upsertRunnerConfig, waitFor } from "./helpers/engine.mjs";

const host = fileURLToPath(new URL("./fixtures/counter-host.mjs", import.meta.url));
let engine;

before(async () => {
	engine = await startEngine({ arch: "v3" });
});
after(async () => {
	await engine?.stop();
});

function startHost(pool) {
	return spawnHost(host, { ENDPOINT: engine.endpoint, POOL: pool });
}

async function increment(actorId) {
	const res = await gatewayFetch(engine.endpoint, actorId, "/request/increment", { method: "POST" });
	assert.equal(res.status, 200);
	return (await res.json()).count;
}

/** Reads the count, retrying while the engine moves the actor to the new host. */
async function readCount(actorId) {
	return await waitFor(
		async () => {
			const res = await gatewayFetch(engine.endpoint, actorId, "/request/read", {
				signal: AbortSignal.timeout(5_000),
			});
			return res.status === 200 ? (await res.json()).count : undefined;
		},
		{ timeoutMs: 60_000, intervalMs: 250, what: "the actor to answer on the new host" },
	);
}

test("a counter keeps its value across a graceful restart of the host", async () => {
	const pool = `restart-${process.pid}`;
	await upsertRunnerConfig(engine.endpoint, pool);
	const first = await startHost(pool);
	const actor = await createActor(engine.endpoint, { name: "counter", key: "graceful", pool });
	assert.equal(await increment(actor.actor_id), 1);
	assert.equal(await increment(actor.actor_id), 2);

	first.child.kill("SIGINT");
	const [code] = await first.exited;
	assert.equal(code, 0, first.output());

	const second = await startHost(pool);
	try {
		assert.equal(await readCount(actor.actor_id), 2);
		assert.equal(await increment(actor.actor_id), 3);
	} finally {
		second.child.kill("SIGINT");
		await second.exited;
	}
});

test("a counter keeps every acknowledged increment across a SIGKILL of the host", async () => {
	const pool = `sigkill-${process.pid}`;
	await upsertRunnerConfig(engine.endpoint, pool);
	const first = await startHost(pool);
	const actor = await createActor(engine.endpoint, { name: "counter", key: "killed", pool });
	for (let i = 1; i <= 5; i++) assert.equal(await increment(actor.actor_id), i);

	first.child.kill("SIGKILL");
	await first.exited;

	const second = await startHost(pool);
	try {
		assert.equal(await readCount(actor.actor_id), 5);
	} finally {
		second.child.kill("SIGINT");
		await second.exited;
	}
});
