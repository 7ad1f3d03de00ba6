// Shared helpers for end-to-end tests that host actors in this process.

import assert from "node:assert/strict";
import { createRequire } from "node:module";

import { gatewayFetch } from "./engine.mjs";

const require = createRequire(import.meta.url);
export const native = require("../../index.js");

export const json = (value) => Buffer.from(JSON.stringify(value));
export const parse = (buffer) => JSON.parse(Buffer.from(buffer).toString() || "null");

let poolCounter = 0;
/** A pool name unique to this process, so tests never share envoys. */
export function uniquePool(prefix = "test") {
	poolCounter += 1;
	return `${prefix}-${process.pid}-${poolCounter}`;
}

/**
 * Serves `actors` ({name: NapiActorFactory}) on `engine` with a fresh pool.
 * Returns `{registry, pool, serving, stop}`; `stop()` shuts down and waits
 * for the drain.
 */
export async function serveActors(engine, actors, config = {}) {
	const registry = new native.CoreRegistry();
	for (const [name, factory] of Object.entries(actors)) registry.register(name, factory);
	const pool = config.poolName ?? uniquePool();
	// The engine's token, as RivetKit always passes one: a host that says it
	// is RivetKit 2.3 would otherwise send 2.3's default, `dev`, which engine
	// 3.0's admin token refuses.
	const serving = registry.serve({
		endpoint: engine.endpoint,
		token: engine.token,
		poolName: pool,
		engineSpawn: "never",
		...config,
	});
	serving.catch(() => {});
	await registry.waitReady();
	return {
		registry,
		pool,
		serving,
		stop: async () => {
			await registry.shutdown();
			await serving;
		},
	};
}

/**
 * Runs test code inside an actor: `inActor(endpoint, actorId, fn)` registers
 * `fn`, sends `POST /request/job/<id>` through the gateway, and returns
 * what `fn(ctx)` returned (or throws what it threw). The actor's
 * `onRequest` hands such requests to `job(path)`: the job for that path,
 * or `undefined` for any other path.
 */
export function actorJobs() {
	const jobs = new Map();
	let next = 0;
	return {
		job(path) {
			return path.startsWith("/job/") ? jobs.get(path.slice("/job/".length)) : undefined;
		},
		async inActor(endpoint, actorId, fn) {
			const id = String(++next);
			let outcome;
			jobs.set(id, async (ctx) => {
				try {
					outcome = { value: await fn(ctx) };
				} catch (error) {
					outcome = { error };
				}
			});
			try {
				const res = await gatewayFetch(endpoint, actorId, `/request/job/${id}`, { method: "POST" });
				assert.equal(res.status, 200, await res.text());
			} finally {
				jobs.delete(id);
			}
			if (outcome.error) throw outcome.error;
			return outcome.value;
		},
	};
}
