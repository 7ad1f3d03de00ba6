// Recovery after a host crash: the actors of a SIGKILLed host come back, on
// a host started right after it, with every state they acknowledged.
//
// The first host starts the engine itself (`engineSpawn: "auto"` on free
// private ports, storage in a temporary RIVETKIT_STORAGE_PATH), so the
// engine runs with the lost-envoy settings of crates/core/src/engine/plan.rs
// and outlives the killed host, as it does for users. How long the actors
// take to come back is measured by bench/recovery.mjs, never asserted here.

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, test } from "node:test";

import { createActor, findFreePorts, gatewayFetch, waitFor } from "./helpers/engine.mjs";

const hostScript = fileURLToPath(new URL("./fixtures/recovery-host.mjs", import.meta.url));
const POOL = "recovery";
const ACTORS = 5;

let storage;
let endpoint;
const hosts = [];

/** Pids of the engines started with our storage directory. */
function enginePids() {
	const pids = [];
	for (const entry of readdirSync("/proc")) {
		if (!/^\d+$/.test(entry)) continue;
		try {
			const cmdline = readFileSync(`/proc/${entry}/cmdline`, "utf8");
			if (cmdline.includes("rivet-engine") && cmdline.includes(storage)) pids.push(Number(entry));
		} catch {}
	}
	return pids;
}

function startHost() {
	const child = spawn(process.execPath, [hostScript], {
		env: {
			...process.env,
			ENDPOINT: endpoint,
			POOL,
			ENGINE_SPAWN: "auto",
			RIVETKIT_STORAGE_PATH: storage,
			RIVET_LOG_LEVEL: "warn",
			RUST_BACKTRACE: "0",
		},
		stdio: ["ignore", "pipe", "pipe"],
	});
	let out = "";
	child.stdout.on("data", (d) => (out += d));
	child.stderr.on("data", (d) => (out += d));
	const host = { child, exited: once(child, "exit"), output: () => out };
	hosts.push(host);
	return host;
}

/** Resolves once `host` printed "ready"; throws if it exited first. */
async function ready(host) {
	const deadline = Date.now() + 60_000;
	while (!host.output().includes("ready")) {
		if (host.child.exitCode !== null) throw new Error(`host exited during start-up:\n${host.output()}`);
		if (Date.now() > deadline) throw new Error(`host not ready after 60 s:\n${host.output()}`);
		await new Promise((r) => setTimeout(r, 50));
	}
}

async function call(actorId, path, init = {}) {
	const res = await gatewayFetch(endpoint, actorId, `/request/${path}`, {
		signal: AbortSignal.timeout(5_000),
		...init,
	});
	const text = await res.text();
	assert.equal(res.status, 200, text);
	return JSON.parse(text);
}

before(() => {
	storage = mkdtempSync(join(tmpdir(), "rivetkit-native-recovery-test-"));
});

after(async () => {
	for (const host of hosts) {
		if (host.child.exitCode === null && host.child.signalCode === null) {
			host.child.kill("SIGINT");
			const timer = setTimeout(() => host.child.kill("SIGKILL"), 30_000);
			await host.exited;
			clearTimeout(timer);
		}
	}
	if (!storage) return;
	for (const pid of enginePids()) {
		try {
			process.kill(pid, "SIGTERM");
		} catch {}
	}
	await waitFor(() => enginePids().length === 0, { timeoutMs: 10_000, what: "the engine to exit" }).catch(() => {
		for (const pid of enginePids()) process.kill(pid, "SIGKILL");
	});
	rmSync(storage, { recursive: true, force: true });
});

test("the actors of a SIGKILLed host come back on a new host with their acknowledged state", async () => {
	const { guard } = await findFreePorts();
	endpoint = `http://127.0.0.1:${guard}`;
	const first = startHost();
	await ready(first);

	// Different acknowledged states: actor i was incremented i + 1 times.
	const actors = [];
	for (let i = 0; i < ACTORS; i++) {
		const actor = await createActor(endpoint, { name: "counter", key: `crash-${i}`, pool: POOL });
		let last;
		for (let n = 0; n <= i; n++) last = await call(actor.actor_id, "increment", { method: "POST" });
		assert.equal(last.count, i + 1);
		assert.equal(last.pid, first.child.pid);
		actors.push({ id: actor.actor_id, count: i + 1 });
	}

	first.child.kill("SIGKILL");
	await first.exited;
	const second = startHost();
	await ready(second);

	// Every actor answers again, from the new host, with its state.
	for (const actor of actors) {
		const state = await waitFor(
			async () => {
				try {
					return await call(actor.id, "read");
				} catch {
					return undefined;
				}
			},
			{ timeoutMs: 90_000, intervalMs: 100, what: `actor ${actor.id} to answer on the new host` },
		);
		assert.deepEqual(state, { count: actor.count, pid: second.child.pid });
	}
	// And keeps working there.
	for (const actor of actors) {
		assert.deepEqual(await call(actor.id, "increment", { method: "POST" }), {
			count: actor.count + 1,
			pid: second.child.pid,
		});
	}

	second.child.kill("SIGINT");
	const [code] = await second.exited;
	assert.equal(code, 0, second.output());
});
