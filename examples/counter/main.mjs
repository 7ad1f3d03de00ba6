// A counter actor served by rivetkit-native on the embedded engine.
//
//   npm start
//
// Starts (or reuses) a local Rivet Engine 3.0 on http://127.0.0.1:6420, serves
// the `counter` actor and prints a curl line that reaches it through the
// engine's gateway. Ctrl-C is handled here, by the application: the library
// never installs a signal handler.

import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
const { CoreRegistry, NapiActorFactory } = require("../../index.js");

const endpoint = process.env.RIVET_ENDPOINT ?? "http://127.0.0.1:6420";
const pool = process.env.RIVET_POOL_NAME ?? "rivetkit-native-example";

const encode = (value) => Buffer.from(JSON.stringify(value));
const decode = (buffer) => JSON.parse(buffer.toString() || "null");

const counter = new NapiActorFactory(
	{
		createState: async (_err, { input }) => encode({ count: input ? (decode(input).start ?? 0) : 0 }),
		onWake: async (_err, { ctx }) => {
			console.log(
				`counter ${ctx
					.key()
					.map((s) => s.stringValue)
					.join("/")} awake (generation ${ctx.generation()})`,
			);
		},
		onSleep: async (_err, { ctx }) => {
			console.log(`counter ${ctx.actorId()} going to sleep`);
		},
		onRequest: async (_err, { ctx, request }) => {
			const state = decode(ctx.state());
			if (request.method === "POST" && request.uri.startsWith("/increment")) {
				state.count += 1;
				await ctx.saveState({ state: encode(state) });
			}
			return {
				status: 200,
				headers: { "content-type": "application/json" },
				body: encode({ count: state.count }),
			};
		},
	},
	{ sleepTimeoutMs: 30_000 },
);

const registry = new CoreRegistry();
registry.register("counter", counter);

let stopping = false;
process.on("SIGINT", () => {
	if (stopping) return;
	stopping = true;
	console.log("\nshutting down...");
	registry.shutdown();
});

const serving = registry.serve({ endpoint, poolName: pool });
serving.catch(() => {});
try {
	await registry.waitReady();
	// Engine 3.0 asks every client for a token (`default` for the engine
	// `serve()` starts); engine 2.3 on loopback ignores it.
	const token = process.env.RIVET_TOKEN ?? "default";
	const url =
		`${endpoint}/gateway/counter/request/increment` +
		`?rvt-namespace=default&rvt-method=getOrCreate&rvt-pool=${pool}&rvt-key=demo&rvt-crash-policy=sleep` +
		`&rvt-token=${encodeURIComponent(token)}`;
	console.log(`\nready. try:\n\n  curl -X POST '${url}'\n\nCtrl-C to stop.`);
} catch (err) {
	console.error(`could not start: ${err.message}`);
	process.exitCode = 1;
}
await serving.catch((err) => {
	console.error(`serve failed: ${err.message}`);
	process.exitCode = 1;
});
console.log("stopped.");
