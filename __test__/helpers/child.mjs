// A child Node process for exit checks: loads the addon, leaves native
// resources behind (see the scenarios) and must then exit by itself.
//
//   node __test__/helpers/child.mjs <scenario>...
//
// Prints "ready" once its work is done; the parent checks that it exits.
// A child that keeps running means something native holds the event loop.

import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
const native = require("../../index.js");
// `__testCallCallback` is only in the debug build with the `testing` feature
// (`npm run build:testing`), loaded by the scenarios that use it.
const testing = () => require("../../target/testing/rivetkit-native.node");

const scenarios = {
	// A listener on a token that is never cancelled: one weak threadsafe
	// function and one idle runtime task stay behind.
	"token-listener": async () => {
		const token = new native.CancellationToken();
		token.onCancelled(() => {
			console.log("unexpected: listener called");
		});
	},
	// A JsCallback that was called and is still held by Rust.
	callback: async () => {
		const callback = async (_err, payload) => `${payload.value}!`;
		const result = await testing().__testCallCallback(callback, "x", { retain: true });
		if (result.value !== "x!") throw new Error(`unexpected result ${JSON.stringify(result)}`);
	},
	// A listener fired from Rust through the weak threadsafe function.
	"token-fired": async () => {
		let fired = false;
		await testing().__testCallCallback((_err, payload) => {
			payload.token.onCancelled(() => {
				fired = true;
			});
			return "ok";
		}, "y");
		await new Promise((resolve) => {
			const poll = () => (fired ? resolve() : setTimeout(poll, 10));
			poll();
		});
	},
	// A panic in a runtime task: a rejection, and the process lives on.
	panic: async () => {
		const err = await testing()
			.__testCallCallback(() => "never", "__panic__")
			.then(
				() => null,
				(e) => e,
			);
		if (err?.code !== "core.internal_error") throw new Error(`unexpected outcome ${err}`);
	},
};

const names = process.argv.slice(2);
for (const name of names) {
	const scenario = scenarios[name];
	if (!scenario) {
		console.error(`unknown scenario ${name}; known: ${Object.keys(scenarios).join(", ")}`);
		process.exit(2);
	}
	await scenario();
}
console.log("ready");
