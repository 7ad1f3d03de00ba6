// Shared helpers for end-to-end tests that host actors in this process.

import { createRequire } from "node:module";

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
	const serving = registry.serve({ endpoint: engine.endpoint, poolName: pool, engineSpawn: "never", ...config });
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
