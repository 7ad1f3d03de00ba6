// Bench host of the side-by-side comparison: the RivetKit app of
// bench/apps/rivetkit-app.mjs (or the file BENCH_APP names: the copy of it
// that bench/lib/rivetkit-alias.mjs puts next to a rivetkit that resolves
// `@rivetkit/rivetkit-napi` to rivetkit-native), started with
// `registry.startAndWait()` (= `registry.start()` plus waiting until its
// envoy registered), so RivetKit installs its own SIGINT/SIGTERM handlers.
// The addon is whatever the app's rivetkit resolves
// `import("@rivetkit/rivetkit-napi")` to.
//
// Configured by the environment RivetKit reads: RIVET_ENDPOINT,
// RIVET_NAMESPACE, RIVET_TOKEN, RIVET_POOL (the envoy pool name).
//
// IPC with the parent: {type: "ready"} once serving; answers {type: "cpu"}
// with {type: "cpu", userMs, systemMs, rssBytes, rssAnonBytes, rssFileBytes}
// and {type: "addon"} with
// {type: "addon", files} (the `.node` files mapped into this process);
// {type: "gc"} runs a full garbage collection (when run with --expose-gc)
// and answers {type: "gc"}; {type: "stop"} calls `registry.shutdown()` and
// exits.

import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";

const app = process.env.BENCH_APP ? pathToFileURL(process.env.BENCH_APP).href : "../apps/rivetkit-app.mjs";
const { registry } = await import(app);

/** Native addons (`*.node`) mapped into this process, from /proc/self/maps. */
function mappedAddons() {
	try {
		const files = new Set();
		for (const line of readFileSync("/proc/self/maps", "utf8").split("\n")) {
			// A file replaced on disk since it was mapped shows as "<path> (deleted)".
			const path = line.split(/\s+/).slice(5).join(" ");
			if (/\.node( \(deleted\))?$/.test(path)) files.add(path);
		}
		return [...files];
	} catch {
		return [];
	}
}

/** `{rssAnonBytes, rssFileBytes}` from /proc/self/status (Linux), else `{}`. */
function rssParts() {
	try {
		const status = readFileSync("/proc/self/status", "utf8");
		const kb = (name) => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, "m").exec(status)?.[1]) * 1024;
		return { rssAnonBytes: kb("RssAnon"), rssFileBytes: kb("RssFile") };
	} catch {
		return {};
	}
}

process.on("message", (message) => {
	if (message?.type === "cpu") {
		const { user, system } = process.cpuUsage();
		process.send({
			type: "cpu",
			userMs: user / 1000,
			systemMs: system / 1000,
			rssBytes: process.memoryUsage.rss(),
			...rssParts(),
		});
	} else if (message?.type === "addon") {
		process.send({ type: "addon", files: mappedAddons() });
	} else if (message?.type === "gc") {
		// Before an RSS sample: the JS heap's garbage out of the figure.
		globalThis.gc?.();
		globalThis.gc?.();
		process.send({ type: "gc" });
	} else if (message?.type === "stop") {
		registry.shutdown().finally(() => process.exit(0));
	}
});
// IPC keeps the event loop alive; let RivetKit's own shutdown decide when
// the process exits (the parent never disconnects first on purpose).
process.channel?.unref();

try {
	await registry.startAndWait();
	process.send?.({ type: "ready" });
} catch (err) {
	console.error(`bench rivetkit host: start failed: ${err?.stack ?? err}`);
	process.exit(1);
}
