// The host owns shutdown: loading and serving install no signal handler,
// and after shutdown() resolves and serve() settles nothing native keeps
// Node's event loop alive (the process exits on its own).

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { fileURLToPath } from "node:url";
import { after, before, test } from "node:test";

import { startEngine, upsertRunnerConfig } from "./helpers/engine.mjs";

const EXIT_BOUND_MS = 5_000;
let engine;

before(async () => {
	engine = await startEngine({ arch: "v3" });
});
after(async () => {
	await engine?.stop();
});

test("a process that served and shut down exits by itself, with no signal listeners added", async () => {
	const pool = `exit-${process.pid}`;
	await upsertRunnerConfig(engine.endpoint, pool);
	const child = spawn(process.execPath, [fileURLToPath(new URL("./fixtures/serve-then-exit.mjs", import.meta.url))], {
		env: { ...process.env, ENDPOINT: engine.endpoint, POOL: pool, RIVET_LOG_LEVEL: "warn" },
		stdio: ["ignore", "pipe", "pipe"],
	});
	let stdout = "";
	let stderr = "";
	child.stderr.on("data", (d) => (stderr += d));
	const shutdownDone = new Promise((resolve) => {
		child.stdout.on("data", (d) => {
			stdout += d;
			if (stdout.includes("shutdown-complete")) resolve();
		});
	});
	const exited = once(child, "exit");
	await Promise.race([shutdownDone, exited]);
	assert.ok(stdout.includes("shutdown-complete"), `child did not finish its work:\n${stdout}\n${stderr}`);

	const timer = setTimeout(() => child.kill("SIGKILL"), EXIT_BOUND_MS);
	const [code, signal] = await exited;
	clearTimeout(timer);
	assert.equal(signal, null, `child did not exit by itself within ${EXIT_BOUND_MS} ms (killed)\n${stderr}`);
	assert.equal(code, 0, stderr);

	const report = JSON.parse(stdout.split("\n")[0]);
	assert.equal(report.response, "pong");
	for (const phase of ["afterLoad", "afterServe", "afterShutdown"]) {
		assert.deepEqual(report[phase], report.before, `signal listeners changed ${phase}`);
	}
});
