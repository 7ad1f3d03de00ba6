// An actor host in a child Node process, so that its CPU time is its own.
//
//   const host = await startHost({ impl: "native", endpoint, pool });
//   const before = await host.cpu();     // {userMs, systemMs, rssBytes}
//   ...
//   await host.stop();
//
// Hosts (bench/hosts/<script>.mjs) serve the bench actors and answer IPC
// messages: {type: "cpu"} → {type: "cpu", userMs, systemMs, rssBytes};
// {type: "stop"} → shut their registry down and exit. The "rivetkit" hosts
// also answer {type: "addon"} → {type: "addon", files} (the native addons
// mapped into the process) and {type: "gc"} → {type: "gc"} after a full
// garbage collection (hosts run with --expose-gc).
//
//   native          bench/hosts/native.mjs: rivetkit-native's API directly
//   rivetkit-napi   bench/hosts/rivetkit.mjs: the RivetKit app on the
//                   reference @rivetkit/rivetkit-napi of the `rivetkit`
//                   version asked for ("2.3", the default: 2.3.19; "3":
//                   3.0.0, bench/lib/stacks.mjs)
//   rivetkit-native the same app and the same rivetkit files, on
//                   rivetkit-native installed under the reference's name
//                   (bench/lib/rivetkit-alias.mjs)
//
// `spawnHost` returns at once (with `spawnedAt` and a `ready` promise), for
// callers that time the start-up themselves; `startHost` waits for `ready`.

import { fork } from "node:child_process";
import { once } from "node:events";
import { fileURLToPath } from "node:url";

import { upsertRunnerConfig } from "./engine.mjs";
import { aliasedApp } from "./rivetkit-alias.mjs";

const script = (name) => fileURLToPath(new URL(`../hosts/${name}`, import.meta.url));
const rivetkitApp = fileURLToPath(new URL("../apps/rivetkit-app.mjs", import.meta.url));
const appFor = (options, napi) => aliasedApp(rivetkitApp, { rivetkit: options.rivetkit ?? "2.3", napi });

/** What each impl runs: `script`, extra `execArgv`, and its environment. */
const HOSTS = {
	native: {
		script: script("native.mjs"),
		execArgv: [],
		env: ({ endpoint, pool }) => ({ BENCH_ENDPOINT: endpoint, BENCH_POOL: pool }),
	},
	"rivetkit-napi": {
		script: script("rivetkit.mjs"),
		execArgv: [],
		env: (options) => ({ ...rivetkitEnv(options), BENCH_APP: appFor(options, "reference") }),
	},
	"rivetkit-native": {
		script: script("rivetkit.mjs"),
		execArgv: [],
		env: (options) => ({ ...rivetkitEnv(options), BENCH_APP: appFor(options, "ours") }),
	},
};

/** The environment RivetKit's config reads (endpoint, namespace, token, pool). */
function rivetkitEnv({ endpoint, pool, namespace = "default", token }) {
	return {
		RIVET_ENDPOINT: endpoint,
		RIVET_NAMESPACE: namespace,
		...(token ? { RIVET_TOKEN: token } : {}),
		RIVET_POOL: pool,
		// A 127.0.0.1 endpoint would otherwise make RivetKit start its
		// "Services" actor host too.
		RIVET_RUN_SERVICES: "0",
	};
}

/**
 * Forks host `impl` on `endpoint` with `pool` (the "rivetkit" hosts: on
 * rivetkit `rivetkit`, "2.3" or "3") and returns at once:
 * `{impl, pid, child, spawnedAt, ready, exited, request, cpu, stop, kill}`;
 * `env` is added to the host's environment; with `captureStderr`, the
 * host's stderr is piped and `stderr()` returns what it wrote so far.
 * `ready` resolves on the host's {type: "ready"} (rejects if it exits
 * first or after `readyTimeoutMs`); `exited` resolves to `{code, signal, at}`.
 */
export function spawnHost({
	impl = "native",
	endpoint,
	pool,
	token,
	rivetkit = "2.3",
	env = {},
	readyTimeoutMs = 60_000,
	captureStderr = false,
}) {
	const spec = HOSTS[impl];
	if (!spec) throw new Error(`unknown host ${impl}; known: ${Object.keys(HOSTS).join(", ")}`);
	const spawnedAt = performance.now();
	const child = fork(spec.script, [], {
		execArgv: [...process.execArgv, "--expose-gc", ...spec.execArgv],
		env: {
			...process.env,
			...spec.env({ endpoint, pool, token, rivetkit }),
			RIVET_LOG_LEVEL: process.env.RIVET_LOG_LEVEL ?? "warn",
			// This machine sets RUST_BACKTRACE=1; production hosts do not.
			RUST_BACKTRACE: "0",
			...env,
		},
		stdio: ["ignore", "inherit", captureStderr ? "pipe" : "inherit", "ipc"],
	});
	const stderrChunks = [];
	child.stderr?.on("data", (chunk) => stderrChunks.push(chunk));
	const exited = once(child, "exit").then(([code, signal]) => ({ code, signal, at: performance.now() }));

	// Replies by message type: waiters first, else queued for a later request.
	const queued = new Map();
	const waiters = new Map();
	child.on("message", (message) => {
		const type = message?.type;
		const waiting = waiters.get(type);
		if (waiting?.length) waiting.shift()(message);
		else queued.set(type, [...(queued.get(type) ?? []), message]);
	});
	child.on("error", () => {}); // sends to an exited child; `exited` reports it
	const nextMessage = (type, timeoutMs) =>
		new Promise((resolve, reject) => {
			const pending = queued.get(type);
			if (pending?.length) return resolve(pending.shift());
			const timer = setTimeout(() => reject(new Error(`host ${impl}: no "${type}" within ${timeoutMs} ms`)), timeoutMs);
			const list = waiters.get(type) ?? [];
			list.push((m) => {
				clearTimeout(timer);
				resolve(m);
			});
			waiters.set(type, list);
		});

	const ready = Promise.race([
		nextMessage("ready", readyTimeoutMs),
		exited.then(({ code, signal }) =>
			Promise.reject(new Error(`host ${impl} exited during start-up (code ${code}, signal ${signal})`)),
		),
	]).then(() => ({ at: performance.now() }));
	ready.catch(() => {});

	const alive = () => child.exitCode === null && child.signalCode === null;
	return {
		impl,
		pid: child.pid,
		child,
		spawnedAt,
		ready,
		exited,
		/** What the host wrote to stderr so far (with `captureStderr`). */
		stderr: () => Buffer.concat(stderrChunks).toString("utf8"),
		/** Sends {type} and resolves to the host's next message of that type. */
		async request(type, timeoutMs = 10_000) {
			if (!alive()) throw new Error(`host ${impl} has exited`);
			const reply = nextMessage(type, timeoutMs);
			child.send({ type });
			return reply;
		},
		/** Cumulative CPU and RSS of the host process. */
		cpu() {
			return this.request("cpu");
		},
		/** Shuts the host down over IPC; kills it if it has not exited within `timeoutMs`. */
		async stop(timeoutMs = 30_000) {
			if (!alive()) return;
			child.send({ type: "stop" });
			const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs);
			await exited;
			clearTimeout(timer);
		},
		/** SIGKILL, and waits for the exit. */
		async kill() {
			if (!alive()) return;
			child.kill("SIGKILL");
			await exited;
		},
	};
}

/** Starts host `impl` on `endpoint` with `pool`; resolves once it serves. */
export async function startHost(options) {
	const host = spawnHost(options);
	try {
		await host.ready;
	} catch (err) {
		await host.kill();
		throw err;
	}
	return host;
}

/**
 * Spawns side `spec`'s host (`{impl}`) of `stack` (bench/lib/stacks.mjs) on
 * `pool`, a pool of its own on `engine`, which it configures first.
 */
export async function spawnSideHost({ engine, stack, spec, pool, env }) {
	await upsertRunnerConfig(engine, pool);
	return spawnHost({ impl: spec.impl, endpoint: engine.endpoint, pool, token: engine.token, rivetkit: stack.key, env });
}
