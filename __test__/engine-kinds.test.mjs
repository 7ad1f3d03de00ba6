// The two engine architectures as `serve()` meets them on a loopback
// endpoint (docs/engine.md, "Two engine architectures"): each RivetKit
// version gets its own engine by default (the version reaches the addon as
// `serverlessPackageVersion`; direct use is 3.0), an engine the host started
// stops with it, one that was already running is reused and left running,
// and one of the other kind is refused with what to do.

import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, test } from "node:test";

import { json, native } from "./helpers/actors.mjs";
import { findFreePorts, startEngine, waitFor } from "./helpers/engine.mjs";
import { isAlive, stopEnginesUnder } from "./helpers/processes.mjs";

const storage = mkdtempSync(join(tmpdir(), "rivetkit-native-engine-kinds-"));
// The engines serve() starts keep their data and logs here.
process.env.RIVETKIT_STORAGE_PATH = storage;

after(async () => {
	// Only reached with an engine still running when a test failed half-way.
	await stopEnginesUnder(storage);
	rmSync(storage, { recursive: true, force: true });
});

/** A registry with one trivial actor type. */
function registry() {
	const r = new native.CoreRegistry();
	r.register("noop", new native.NapiActorFactory({ createState: async () => json({}) }, {}));
	return r;
}

/** `/health` of the engine at `endpoint`. */
async function health(endpoint) {
	return (await fetch(`${endpoint}/health`, { signal: AbortSignal.timeout(5_000) })).json();
}

/** The pid of the engine listening on `port` (Linux: /proc/net/tcp is not needed, /proc cmdline is). */
async function enginePidOn(port) {
	const { readdirSync, readFileSync } = await import("node:fs");
	for (const pid of readdirSync("/proc").filter((p) => /^\d+$/.test(p))) {
		try {
			const environ = readFileSync(`/proc/${pid}/environ`, "utf8");
			if (environ.includes(`RIVET__GUARD__PORT=${port}\0`) && environ.includes(storage)) return Number(pid);
		} catch {}
	}
	return null;
}

describe("serve() on a loopback endpoint", { skip: process.platform !== "linux" && "reads /proc" }, () => {
	for (const [version, arch] of [
		["2.3.19", undefined],
		["3.0.0", "v3"],
		[undefined, "v3"],
	]) {
		const who = version ? `rivetkit ${version}` : "direct use";
		test(`${who} gets engine ${arch ?? "2.3"}, started by the host and stopped with it`, async () => {
			const port = (await findFreePorts()).guard;
			const endpoint = `http://127.0.0.1:${port}`;
			const r = registry();
			const serving = r.serve({
				endpoint,
				poolName: "kinds",
				...(version ? { serverlessPackageVersion: version } : {}),
			});
			serving.catch(() => {});
			await r.waitReady();
			assert.equal((await health(endpoint)).architecture, arch);
			const pid = await enginePidOn(port);
			assert.ok(pid && isAlive(pid), "the engine runs");
			await r.shutdown();
			await serving;
			await waitFor(() => !isAlive(pid), { timeoutMs: 20_000, what: "the engine to stop with its host" });
		});
	}

	test("a running engine of the kind the app needs is reused and left running", async () => {
		const engine = await startEngine({ arch: "v3" });
		try {
			const r = registry();
			const serving = r.serve({ endpoint: engine.endpoint, poolName: "kinds", serverlessPackageVersion: "3.0.0" });
			serving.catch(() => {});
			await r.waitReady();
			await r.shutdown();
			await serving;
			assert.equal((await health(engine.endpoint)).architecture, "v3", "still running");
		} finally {
			await engine.stop();
		}
	});

	for (const [version, arch, wanted] of [
		["3.0.0", "v2", "engine 3.0"],
		["2.3.19", "v3", "engine 2.3"],
	]) {
		test(`rivetkit ${version} refuses a running engine of the other kind, saying what to do`, async () => {
			const engine = await startEngine({ arch });
			try {
				const r = registry();
				await assert.rejects(
					r.serve({
						endpoint: engine.endpoint,
						poolName: "kinds",
						serverlessPackageVersion: version,
						// The rejection is this test's to check.
						exitCodeOnFailure: false,
					}),
					(err) => {
						assert.equal(err.code, "engine.wrong_architecture", err.message);
						assert.match(err.message, new RegExp(`needs ${wanted}`));
						assert.match(err.message, /Stop it/);
						return true;
					},
				);
			} finally {
				await engine.stop();
			}
		});
	}
});
