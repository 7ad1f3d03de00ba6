// Bench host: rivetkit-native serving the bench actors. Run by
// bench/lib/host.mjs as a child process; talks to its parent over IPC.
// BENCH_ADDON (a path to the package's index.js) selects another build of
// the addon, e.g. a release build put elsewhere. BENCH_ENGINE_SPAWN
// (default `never`) is passed as `engineSpawn`: `auto` lets the host start
// the engine itself, with the settings of crates/core/src/engine/plan.rs
// (bench/recovery.mjs).
//
// Actors:
//   counter  actions: increment(by) → count (state saved each call), get() → count
//   chat     actions: echo(x) → x; broadcast(seq) → seq, after broadcasting
//            event "msg" [seq] to every subscribed connection (no state)

import { createRequire } from "node:module";
import { resolve } from "node:path";

import { decode, encode } from "cbor-x";

const require = createRequire(import.meta.url);
const { CoreRegistry, NapiActorFactory } = require(
	process.env.BENCH_ADDON ? resolve(process.env.BENCH_ADDON) : "../../index.js",
);

const cbor = (value) => Buffer.from(encode(value));

const counter = new NapiActorFactory(
	{
		createState: async () => cbor({ count: 0 }),
		actions: {
			increment: async (_err, { ctx, args }) => {
				const [by = 1] = decode(args);
				const next = { count: decode(ctx.state()).count + by };
				await ctx.saveState({ state: cbor(next) });
				return cbor(next.count);
			},
			get: async (_err, { ctx }) => cbor(decode(ctx.state()).count),
		},
	},
	{ sleepTimeoutMs: 300_000 },
);

const chat = new NapiActorFactory(
	{
		createState: async () => cbor({}),
		actions: {
			echo: async (_err, { args }) => cbor(decode(args)[0] ?? null),
			broadcast: async (_err, { ctx, args }) => {
				const [seq] = decode(args);
				ctx.broadcast("msg", cbor([seq]));
				return cbor(seq);
			},
		},
	},
	{ sleepTimeoutMs: 300_000 },
);

const registry = new CoreRegistry();
registry.register("counter", counter);
registry.register("chat", chat);
const serving = registry.serve({
	endpoint: process.env.BENCH_ENDPOINT,
	poolName: process.env.BENCH_POOL,
	engineSpawn: process.env.BENCH_ENGINE_SPAWN ?? "never",
});
serving.catch((err) => {
	console.error(`bench host: serve failed: ${err.message}`);
	process.exit(1);
});

let stopping = false;
async function stop() {
	if (stopping) return;
	stopping = true;
	await registry.shutdown();
	await serving.catch(() => {});
	process.disconnect?.();
}

process.on("message", (message) => {
	if (message?.type === "cpu") {
		const { user, system } = process.cpuUsage();
		process.send({ type: "cpu", userMs: user / 1000, systemMs: system / 1000, rssBytes: process.memoryUsage.rss() });
	} else if (message?.type === "stop") {
		stop();
	}
});
// The parent went away: wind down rather than linger.
process.on("disconnect", () => stop());

await registry.waitReady();
process.send({ type: "ready" });
