// Test harness: a real Rivet Engine (npm `@rivetkit/engine-cli`) on free
// private ports with a temporary database, plus helpers for its HTTP API.
//
//   const engine = await startEngine();
//   try {
//     await upsertRunnerConfig(engine.endpoint, "my-pool");
//     const actor = await createActor(engine.endpoint, { name: "counter", key: "a", pool: "my-pool" });
//     const res = await gatewayFetch(engine.endpoint, actor.actor_id, "/ping");
//   } finally {
//     await engine.stop();
//   }
//
// Tests may poll state with `waitFor`, but never assert timings.

import { spawn } from "node:child_process";
import { once } from "node:events";
import { mkdtempSync, openSync, readFileSync, rmSync, writeFileSync, closeSync, existsSync } from "node:fs";
import { createRequire } from "node:module";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";

const require = createRequire(import.meta.url);

export const NAMESPACE = "default";
/** Runner pool used only to probe that a new engine accepts writes. */
const PROBE_POOL = "rivetkit-native-harness-probe";
/** Admin token of the engines started here; the API helpers send it. */
export const ADMIN_TOKEN = process.env.RIVET__AUTH__ADMIN_TOKEN || "default";

/** Absolute path of the engine binary (`RIVET_ENGINE_BINARY` overrides). */
export function enginePath() {
	return require("@rivetkit/engine-cli").getEnginePath();
}

/** Resolves true if `port` can be bound on 127.0.0.1 right now. */
function portIsFree(port) {
	return new Promise((resolve) => {
		const server = createServer();
		server.unref();
		server.once("error", () => resolve(false));
		server.listen({ port, host: "127.0.0.1", exclusive: true }, () => {
			server.close(() => resolve(true));
		});
	});
}

/**
 * A guard port `p` such that `p`, `p + 1` (api-peer) and `p + 10` (metrics)
 * are free, from a random base in 20000–60000.
 */
export async function findFreePorts(attempts = 50) {
	for (let i = 0; i < attempts; i++) {
		const guard = 20000 + Math.floor(Math.random() * 40000);
		const ports = [guard, guard + 1, guard + 10];
		let free = true;
		for (const port of ports) {
			if (!(await portIsFree(port))) {
				free = false;
				break;
			}
		}
		if (free) return { guard, apiPeer: guard + 1, metrics: guard + 10 };
	}
	throw new Error(`no free port triple found after ${attempts} attempts`);
}

/** The engine's config file: topology pointing at the real ports. */
export function engineConfig({ host, guard, apiPeer }) {
	return {
		telemetry: { enabled: false },
		topology: {
			datacenter_label: 1,
			datacenters: {
				default: {
					datacenter_label: 1,
					is_leader: true,
					public_url: `http://${host}:${guard}/`,
					peer_url: `http://${host}:${apiPeer}/`,
				},
			},
		},
	};
}

/** Environment of the engine process (registry-lifecycle.md §6.2). */
export function engineEnv({ host, guard, apiPeer, metrics, dbPath }) {
	return {
		RIVET__AUTH__ADMIN_TOKEN: ADMIN_TOKEN,
		RIVET__GUARD__HOST: host,
		RIVET__GUARD__PORT: String(guard),
		RIVET__API_PEER__HOST: host,
		RIVET__API_PEER__PORT: String(apiPeer),
		RIVET__METRICS__HOST: host,
		RIVET__METRICS__PORT: String(metrics),
		RIVET__FILE_SYSTEM__PATH: dbPath,
		RIVET__PEGBOARD__RETRY_RESET_DURATION: "100",
		RIVET__PEGBOARD__BASE_RETRY_TIMEOUT: "100",
		RIVET__PEGBOARD__RESCHEDULE_BACKOFF_MAX_EXPONENT: "1",
		RIVET__PEGBOARD__RUNNER_ELIGIBLE_THRESHOLD: "5000",
		RIVET__PEGBOARD__ENVOY_ELIGIBLE_THRESHOLD: "5000",
		RIVET__PEGBOARD__RUNNER_LOST_THRESHOLD: "7000",
		RIVET__PEGBOARD__ENVOY_LOST_THRESHOLD: "7000",
		RIVET__PEGBOARD__MIN_METADATA_POLL_INTERVAL: "1000",
		RIVET__FEATURES__GUARD_GATEWAY_V3__MODE: "on",
		RIVET__FEATURES__GUARD_GATEWAY_V3__PERCENTAGE: "100",
		RIVET__RUNTIME__WORKER_SHUTDOWN_DURATION: "1",
		RIVET__RUNTIME__GUARD_SHUTDOWN_DURATION: "1",
		RIVET__RUNTIME__FORCE_SHUTDOWN_DURATION: "2",
		// No load shedding: without a CPU cgroup of its own, the engine's
		// workflow worker measures the whole machine's CPU and pulls fewer
		// ready workflows above 70% of it (5% at 90%), so other test files,
		// a build or a busy core stalled actor creates, wakes and alarms
		// (route_resolve_query_timeout, PUT /actors 500). docs/engine.md.
		RIVET__RUNTIME__WORKER_CPU_MAX: "1000000",
	};
}

function tail(path, lines = 40) {
	if (!existsSync(path)) return "";
	return readFileSync(path, "utf8").split("\n").slice(-lines).join("\n");
}

/**
 * Starts an engine and waits until `GET /health` answers ok and the API
 * accepts writes (a probe runner-config upsert, removed again).
 *
 * Returns `{endpoint, token, namespace, guardPort, apiPeerPort, metricsPort,
 * dir, logs, pid, logTail, stop}`;
 * `stop()` sends SIGTERM, then SIGKILL after 5 s, and removes the temporary
 * directory (database, config, logs). Set `KEEP_ENGINE_DIR=1` to keep it.
 */
export async function startEngine({ healthTimeoutMs = 30_000, env = {} } = {}) {
	const host = "127.0.0.1";
	const ports = await findFreePorts();
	const dir = mkdtempSync(join(tmpdir(), "rivetkit-native-engine-"));
	const dbPath = join(dir, "db");
	const configPath = join(dir, "engine.json");
	const logs = { stdout: join(dir, "engine-stdout.log"), stderr: join(dir, "engine-stderr.log") };
	writeFileSync(configPath, JSON.stringify(engineConfig({ host, ...ports }), null, 2));

	const stdoutFd = openSync(logs.stdout, "a");
	const stderrFd = openSync(logs.stderr, "a");
	const child = spawn(enginePath(), ["start", "--config", configPath], {
		env: { ...process.env, ...engineEnv({ host, ...ports, dbPath }), ...env },
		stdio: ["ignore", stdoutFd, stderrFd],
		// Own process group: a terminal's Ctrl-C does not reach it.
		detached: true,
	});
	closeSync(stdoutFd);
	closeSync(stderrFd);
	let exited = null;
	const exitPromise = once(child, "exit").then(([code, signal]) => {
		exited = { code, signal };
		return exited;
	});

	const endpoint = `http://${host}:${ports.guard}`;
	const logTail = () =>
		`--- engine stderr (${logs.stderr}) ---\n${tail(logs.stderr)}\n--- engine stdout ---\n${tail(logs.stdout)}`;

	let stopped = false;
	const stop = async () => {
		if (stopped) return;
		stopped = true;
		if (!exited) {
			child.kill("SIGTERM");
			const timer = setTimeout(() => {
				if (!exited) child.kill("SIGKILL");
			}, 5_000);
			await exitPromise;
			clearTimeout(timer);
		}
		if (!process.env.KEEP_ENGINE_DIR) rmSync(dir, { recursive: true, force: true });
	};

	try {
		await waitFor(
			async () => {
				if (exited) {
					throw new Error(`engine exited during start-up (code ${exited.code}, signal ${exited.signal})\n${logTail()}`);
				}
				try {
					const res = await fetch(`${endpoint}/health`, { signal: AbortSignal.timeout(1_000) });
					if (!res.ok) return false;
					const body = await res.json();
					return body.status === "ok";
				} catch {
					return false;
				}
			},
			{ timeoutMs: healthTimeoutMs, intervalMs: 100, what: "engine /health" },
		);
		// `/health` answers before the engine can write: wait until a
		// runner-config upsert goes through, then remove the probe.
		const probe = `/runner-configs/${PROBE_POOL}`;
		await waitFor(
			async () => {
				if (exited) throw new Error(`engine exited during start-up (code ${exited.code})\n${logTail()}`);
				await apiOnce(endpoint, "PUT", probe, { datacenters: { default: { normal: {} } } });
				return true;
			},
			{ timeoutMs: healthTimeoutMs, intervalMs: 100, what: "engine API readiness (runner-config upsert)" },
		);
		await api(endpoint, "DELETE", probe);
	} catch (err) {
		await stop();
		if (String(err.message).includes("engine exited")) throw err;
		throw new Error(`${err.message}\n${logTail()}`);
	}

	return {
		endpoint,
		token: ADMIN_TOKEN,
		namespace: NAMESPACE,
		guardPort: ports.guard,
		apiPeerPort: ports.apiPeer,
		metricsPort: ports.metrics,
		dir,
		logs,
		pid: child.pid,
		logTail,
		stop,
	};
}

/**
 * Polls `predicate` (sync or async) until it returns a truthy value, which
 * is returned. Throws after `timeoutMs` (with the last error, if any).
 */
export async function waitFor(predicate, { timeoutMs = 10_000, intervalMs = 50, what = "condition" } = {}) {
	const deadline = Date.now() + timeoutMs;
	let lastError;
	for (;;) {
		try {
			const value = await predicate();
			if (value) return value;
		} catch (err) {
			if (String(err?.message).includes("engine exited")) throw err;
			lastError = err;
		}
		if (Date.now() >= deadline) {
			const detail = lastError ? ` (last error: ${lastError.message})` : "";
			throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${detail}`);
		}
		await new Promise((r) => setTimeout(r, intervalMs));
	}
}

/** An error answer of the engine API: `status` and the decoded `body`. */
class EngineApiError extends Error {
	constructor(method, url, status, text, body) {
		super(`${method} ${url.pathname} -> ${status}: ${text}`);
		this.status = status;
		this.body = body ?? text;
	}
}

async function apiOnce(endpoint, method, path, body) {
	const url = new URL(path, endpoint);
	if (!url.searchParams.has("namespace")) url.searchParams.set("namespace", NAMESPACE);
	const res = await fetch(url, {
		method,
		headers: {
			authorization: `Bearer ${ADMIN_TOKEN}`,
			...(body === undefined ? {} : { "content-type": "application/json" }),
		},
		body: body === undefined ? undefined : JSON.stringify(body),
		signal: AbortSignal.timeout(60_000),
	});
	const text = await res.text();
	let json;
	try {
		json = text ? JSON.parse(text) : {};
	} catch {
		json = undefined;
	}
	if (!res.ok) throw new EngineApiError(method, url, res.status, text, json);
	return json ?? text;
}

/**
 * Calls the engine API. Idempotent calls (`retry`) are retried for up to
 * `retryMs` on 5xx and 429 answers: a freshly started engine answers
 * `/health` before it can serve every call (e.g. runner-config upserts fail
 * with 500 "replica 1 has not been configured yet" for a moment).
 */
async function api(endpoint, method, path, body, { retry = method !== "POST", retryMs = 10_000 } = {}) {
	const deadline = Date.now() + retryMs;
	for (;;) {
		try {
			return await apiOnce(endpoint, method, path, body);
		} catch (err) {
			const transient = err instanceof EngineApiError && (err.status >= 500 || err.status === 429);
			if (!retry || !transient || Date.now() >= deadline) throw err;
			await new Promise((r) => setTimeout(r, 100));
		}
	}
}

/** `PUT /runner-configs/{pool}`: required before an envoy of the pool connects. */
export function upsertRunnerConfig(endpoint, pool) {
	return api(endpoint, "PUT", `/runner-configs/${encodeURIComponent(pool)}`, {
		datacenters: { default: { normal: {} } },
	});
}

/**
 * `PUT /runner-configs/{pool}` for a serverless pool: the engine calls
 * `{url}/start` when it needs a host for an actor of the pool (and reads
 * `{url}/metadata` when the config is saved). The body is the one
 * RivetKit's `configurePool` writes.
 */
export function upsertServerlessRunnerConfig(
	endpoint,
	pool,
	url,
	{ requestLifespan = 3600, drainGracePeriod = 30, headers = {} } = {},
) {
	return api(endpoint, "PUT", `/runner-configs/${encodeURIComponent(pool)}`, {
		datacenters: {
			default: {
				serverless: {
					url,
					headers,
					request_lifespan: requestLifespan,
					drain_grace_period: drainGracePeriod,
					metadata_poll_interval: 1000,
					max_runners: 1000,
					min_runners: 0,
					runners_margin: 0,
					slots_per_runner: 1,
				},
				metadata: {},
				drain_on_version_upgrade: true,
			},
		},
	});
}

function actorBody({ name, key, pool, input }) {
	const body = { name, key, runner_name_selector: pool, crash_policy: "sleep" };
	if (input !== undefined) {
		const bytes = typeof input === "string" ? Buffer.from(input) : Buffer.from(input);
		body.input = bytes.toString("base64");
	}
	return body;
}

/** `POST /actors`: creates an actor; resolves to the actor object (`actor_id`, ...). */
export async function createActor(endpoint, { name, key, pool, input }) {
	const res = await api(endpoint, "POST", "/actors", actorBody({ name, key, pool, input }));
	return res.actor;
}

/** `PUT /actors`: get-or-create; resolves to `{actor, created}`. */
export function getOrCreateActor(endpoint, { name, key, pool, input }) {
	return api(endpoint, "PUT", "/actors", actorBody({ name, key, pool, input }));
}

/** `GET /actors?actor_ids=`: the actor object, or `null` if unknown. */
export async function getActor(endpoint, actorId) {
	const res = await api(endpoint, "GET", `/actors?actor_ids=${encodeURIComponent(actorId)}`);
	return res.actors?.[0] ?? null;
}

/** `POST /actors/{id}/sleep`. */
export function sleepActor(endpoint, actorId) {
	return api(endpoint, "POST", `/actors/${encodeURIComponent(actorId)}/sleep`, {});
}

/** `DELETE /actors/{id}`. */
export function destroyActor(endpoint, actorId) {
	return api(endpoint, "DELETE", `/actors/${encodeURIComponent(actorId)}`);
}

/** `fetch` through the gateway with path routing: `/gateway/{id}{path}`. */
export function gatewayFetch(endpoint, actorId, path = "/", init = {}) {
	const suffix = path.startsWith("/") ? path : `/${path}`;
	return fetch(`${endpoint}/gateway/${encodeURIComponent(actorId)}${suffix}`, {
		signal: AbortSignal.timeout(60_000),
		...init,
	});
}

/**
 * Runs a host fixture (`node <script>`) with `env` on top of this process's
 * environment, and resolves once it printed "ready". Returns
 * `{child, exited, output}`: `exited` resolves with `[code, signal]`, and
 * `output()` is everything it printed so far.
 */
export async function spawnHost(script, env = {}) {
	const child = spawn(process.execPath, [script], {
		// RIVETKIT_TEST_HOST_LOG=<filter> for a closer look at a failure.
		env: { ...process.env, RIVET_LOG_LEVEL: process.env.RIVETKIT_TEST_HOST_LOG || "warn", ...env },
		stdio: ["ignore", "pipe", "pipe"],
	});
	let out = "";
	child.stdout.on("data", (d) => (out += d));
	child.stderr.on("data", (d) => (out += d));
	const exited = once(child, "exit");
	await waitFor(() => out.includes("ready"), { timeoutMs: 30_000, what: "host ready" });
	return { child, exited, output: () => out };
}
