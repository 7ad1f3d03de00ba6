// An actor host in a child Node process, so that its CPU time is its own.
//
//   const host = await startHost({ impl: "native", endpoint, pool });
//   const before = await host.cpu();     // {userMs, systemMs, rssBytes}
//   ...
//   await host.stop();
//
// The child (bench/hosts/<impl>.mjs) serves the bench actors and answers
// IPC messages: {type: "cpu"} → {type: "cpu", userMs, systemMs, rssBytes};
// {type: "stop"} → shuts its registry down and exits.

import { fork } from "node:child_process";
import { once } from "node:events";
import { fileURLToPath } from "node:url";

const HOSTS = {
	native: fileURLToPath(new URL("../hosts/native.mjs", import.meta.url)),
};

/** Starts host `impl` on `endpoint` with `pool`; resolves once it serves. */
export async function startHost({ impl = "native", endpoint, pool, readyTimeoutMs = 60_000 }) {
	const script = HOSTS[impl];
	if (!script) throw new Error(`unknown host ${impl}; known: ${Object.keys(HOSTS).join(", ")}`);
	const child = fork(script, [], {
		env: { ...process.env, BENCH_ENDPOINT: endpoint, BENCH_POOL: pool, RIVET_LOG_LEVEL: process.env.RIVET_LOG_LEVEL ?? "warn" },
		stdio: ["ignore", "inherit", "inherit", "ipc"],
	});
	const exited = once(child, "exit");
	const replies = [];
	const waiters = [];
	child.on("message", (message) => {
		const waiter = waiters.shift();
		if (waiter) waiter(message);
		else replies.push(message);
	});
	const nextMessage = (timeoutMs) =>
		new Promise((resolve, reject) => {
			if (replies.length) return resolve(replies.shift());
			const timer = setTimeout(() => reject(new Error(`host ${impl}: no answer within ${timeoutMs} ms`)), timeoutMs);
			waiters.push((m) => {
				clearTimeout(timer);
				resolve(m);
			});
		});

	const ready = await Promise.race([
		nextMessage(readyTimeoutMs),
		exited.then(([code]) => Promise.reject(new Error(`host ${impl} exited during start-up (code ${code})`))),
	]);
	if (ready?.type !== "ready") throw new Error(`host ${impl}: unexpected first message ${JSON.stringify(ready)}`);

	return {
		impl,
		pid: child.pid,
		/** Cumulative CPU and RSS of the host process. */
		async cpu() {
			child.send({ type: "cpu" });
			const reply = await nextMessage(10_000);
			if (reply?.type !== "cpu") throw new Error(`host ${impl}: unexpected reply ${JSON.stringify(reply)}`);
			return reply;
		},
		/** Shuts the host down; kills it if it has not exited within `timeoutMs`. */
		async stop(timeoutMs = 30_000) {
			if (child.exitCode !== null || child.signalCode !== null) return;
			child.send({ type: "stop" });
			const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs);
			await exited;
			clearTimeout(timer);
		},
	};
}
