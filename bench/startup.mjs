// `node bench/startup.mjs [impl] [runs]`: spawn → envoy registered → first
// answered action, many times, for one host of the comparison's app
// (bench/hosts/rivetkit.mjs; impl `rivetkit-native`, the default, or
// `rivetkit-napi`), each run on a pool of its own against one bench engine.
// Prints each run and the median; a run whose first action took seconds
// after its envoy registered points at the engine placing the actor (the
// host has nothing to do until the engine's start command arrives: run with
// RIVET_LOG_LEVEL=debug to see when it did).
//
// Knobs (environment): DELAY (ms between "registered" and the first
// action), RIVET_LOG_LEVEL (the host's), KEEP_ENGINE_DIR=1 (keep the
// engine's logs; RUST_LOG sets the engine's level).

import { createClient } from "rivetkit/client";

import { listEnvoys, startBenchEngine, upsertRunnerConfig } from "./lib/engine.mjs";
import { spawnHost } from "./lib/host.mjs";
import { fmt } from "./lib/stats.mjs";

const impl = process.argv[2] ?? "rivetkit-native";
const runs = Number(process.argv[3] ?? 10);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const engine = await startBenchEngine();
const results = [];
try {
	for (let r = 0; r < runs; r++) {
		const pool = `startup-${r}-${process.pid}`;
		await upsertRunnerConfig(engine.endpoint, pool);
		const client = createClient({
			endpoint: engine.endpoint,
			namespace: "default",
			token: engine.token,
			poolName: pool,
			encoding: "bare",
		});
		const host = spawnHost({ impl, endpoint: engine.endpoint, pool, token: engine.token });
		try {
			let registered;
			for (;;) {
				const envoys = await listEnvoys(engine.endpoint).catch(() => []);
				if (envoys.some((e) => e.pool_name === pool && !e.stop_ts)) {
					registered = performance.now() - host.spawnedAt;
					break;
				}
				await sleep(20);
			}
			if (process.env.DELAY) await sleep(Number(process.env.DELAY));
			const sent = performance.now();
			await client.counter.getOrCreate([`k${r}`]).increment(1);
			const first = performance.now() - host.spawnedAt;
			results.push(first);
			console.log(
				`[${new Date().toISOString()}] run ${r}: registered ${fmt(registered, 0)} ms, first action ${fmt(first, 0)} ms ` +
					`(${fmt(performance.now() - sent, 0)} ms after it was sent)`,
			);
		} finally {
			await host.kill();
			await client.dispose();
		}
	}
} finally {
	await engine.stop();
}
const sorted = [...results].sort((a, b) => a - b);
console.log(
	`${impl}: median first action ${fmt(sorted[Math.floor(sorted.length / 2)], 0)} ms over ${sorted.length} runs`,
);
