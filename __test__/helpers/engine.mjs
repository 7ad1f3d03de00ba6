// Test harness: a real Rivet Engine (npm `@rivetkit/engine-cli`) on free
// private ports with a temporary data directory, plus helpers for its HTTP
// API that work on either engine.
//
//   const engine = await startEngine();               // engine 3.0 ("v3")
//   const old = await startEngine({ arch: "v2" });    // engine 2.3.19
//   try {
//     await upsertRunnerConfig(engine.endpoint, "my-pool");
//     const actor = await createActor(engine.endpoint, { name: "counter", key: "a", pool: "my-pool" });
//     const res = await gatewayFetch(engine.endpoint, actor.actor_id, "/ping");
//   } finally {
//     await engine.stop();
//   }
//
// Two engines, told apart by `arch`:
//
// - "v3": engine 3.0.0, `@rivetkit/engine-cli` of this package's own
//   dependencies (the root `node_modules`). The default, and what the
//   direct-API tests run on. RIVETKIT_TEST_ENGINE_ARCH=v2 makes v2 the
//   default for a run.
// - "v2": engine 2.3.19, the `@rivetkit/engine-cli` that rivetkit@2.3.19
//   depends on (npm nests it under node_modules/rivetkit/node_modules).
//
// Each binary is checked once per process: engine 3.0 answers
// `--runtime-info` with `{"architecture":"v3",...}`; 2.3.19 has no such
// flag. The API helpers take an endpoint (or an engine object) and find its
// arch from the engines started here, else from its `GET /health`.
//
// Tests may poll state with `waitFor`, but never assert timings.

import { spawn, spawnSync } from "node:child_process";
import { once } from "node:events";
import { closeSync, existsSync, mkdirSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";

import { killOnExit, logTail as fileTail } from "./processes.mjs";

const require = createRequire(import.meta.url);

export const NAMESPACE = "default";
/** Admin token of the engines started here; the API helpers send it. */
export const ADMIN_TOKEN = process.env.RIVET__AUTH__ADMIN_TOKEN || "default";
/** The engine generations the harness can start. */
export const ARCHES = Object.freeze(["v3", "v2"]);
/**
 * The arch of `startEngine()` without one: v2 unless RIVETKIT_TEST_ENGINE_ARCH
 * says otherwise. The files ported to engine 3.0 ask for `{ arch: "v3" }`
 * themselves; the others still run on 2.3 (docs/testing.md lists both, and
 * `RIVETKIT_TEST_ENGINE_ARCH=v3` runs every file on 3.0 to port the next).
 */
export const DEFAULT_ARCH = checkArch(process.env.RIVETKIT_TEST_ENGINE_ARCH || "v2");
/** Prefix of every temporary directory of the harness (scripts/test-js.mjs looks for engines in them). */
export const TEMP_PREFIX = "rivetkit-native-";

/** Runner pool of engine 2.3.19 used only to probe that a new engine accepts writes. */
const PROBE_POOL = "rivetkit-native-harness-probe";
/** Engine 3.0 storage is ready once this lookup answers 200 (what rivetkit 3.0 waits for). */
const READINESS_PROBE = "/actors?name=rivetkit-readiness-probe&key=probe";

function checkArch(arch) {
	if (!ARCHES.includes(arch)) throw new Error(`engine arch must be one of ${ARCHES.join(", ")}, got ${arch}`);
	return arch;
}

/** The directory of the package.json above `file`. */
function packageDir(file) {
	let dir = dirname(file);
	while (!existsSync(join(dir, "package.json"))) {
		if (dirname(dir) === dir) throw new Error(`no package.json above ${file}`);
		dir = dirname(dir);
	}
	return dir;
}

/**
 * The `@rivetkit/engine-cli` module of `arch`: v3 from this package's
 * dependencies, v2 from rivetkit@2.3.19's own.
 */
function engineCli(arch) {
	if (arch === "v3") return require("@rivetkit/engine-cli");
	const rivetkit = packageDir(require.resolve("rivetkit"));
	const version = JSON.parse(readFileSync(join(rivetkit, "package.json"), "utf8")).version;
	if (!version.startsWith("2.")) throw new Error(`engine v2 comes from rivetkit@2.3.19, found rivetkit@${version}`);
	return createRequire(join(rivetkit, "package.json"))("@rivetkit/engine-cli");
}

const checked = new Map();

/**
 * `{arch, version}` of the binary at `path`: `--runtime-info` on engine 3.0,
 * `--version` on 2.3.19 (which knows no `--runtime-info`).
 */
export function binaryInfo(path) {
	if (checked.has(path)) return checked.get(path);
	const run = (flag) => spawnSync(path, [flag], { encoding: "utf8", timeout: 20_000 });
	const info = run("--runtime-info");
	let result = null;
	if (info.status === 0) {
		try {
			const parsed = JSON.parse(info.stdout.trim().split("\n").pop());
			result = { arch: parsed.architecture, version: parsed.version };
		} catch {}
	}
	if (!result) {
		const version = run("--version");
		if (version.error) throw new Error(`cannot run the engine binary ${path}: ${version.error.message}`);
		result = { arch: "v2", version: /(\d+\.\d+\.\d+\S*)/.exec(version.stdout)?.[1] ?? "unknown" };
	}
	checked.set(path, result);
	return result;
}

/**
 * Absolute path of the engine binary of `arch`, checked to be that arch.
 * `RIVET_ENGINE_BINARY` (read by `@rivetkit/engine-cli`) overrides both
 * and must then be of the arch asked for.
 */
export function enginePath(arch = DEFAULT_ARCH) {
	checkArch(arch);
	const path = engineCli(arch).getEnginePath();
	const info = binaryInfo(path);
	if (info.arch !== arch) {
		throw new Error(`the ${arch} engine binary ${path} is ${info.arch} (version ${info.version})`);
	}
	return path;
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

/** Ports are picked from here: below 32768, where Linux starts handing out outgoing (ephemeral) ports. */
const PORT_MIN = 10_000;
const PORT_MAX = 32_000;

/**
 * A guard port `p` such that `p`, `p + 1` (api-peer) and `p + 10` (metrics)
 * are free, from a random base in 10000-32000 (all below the ephemeral
 * range, so no outgoing connection can hold one of them).
 */
export async function findFreePorts(attempts = 50) {
	for (let i = 0; i < attempts; i++) {
		const guard = PORT_MIN + Math.floor(Math.random() * (PORT_MAX - PORT_MIN - 10));
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

/** The engine's config file: topology pointing at the real ports (the same on both arches). */
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

const common = ({ host, guard, apiPeer, metrics }) => ({
	RIVET__AUTH__ADMIN_TOKEN: ADMIN_TOKEN,
	RIVET__GUARD__HOST: host,
	RIVET__GUARD__PORT: String(guard),
	RIVET__API_PEER__HOST: host,
	RIVET__API_PEER__PORT: String(apiPeer),
	RIVET__METRICS__HOST: host,
	RIVET__METRICS__PORT: String(metrics),
	RIVET__RUNTIME__WORKER_SHUTDOWN_DURATION: "1",
	RIVET__RUNTIME__GUARD_SHUTDOWN_DURATION: "1",
	// No load shedding: without a CPU cgroup of its own, the engine's
	// workflow worker measures the whole machine's CPU and pulls fewer
	// ready workflows above 70% of it (5% at 90%), so other test files,
	// a build or a busy core stalled actor creates, wakes and alarms
	// (route_resolve_query_timeout, PUT /actors 500). docs/engine.md.
	RIVET__RUNTIME__WORKER_CPU_MAX: "1000000",
});

/**
 * Environment of the engine process. v2 (registry-lifecycle.md §6.2):
 * `dbPath` is its file-system database. v3: `dataDir` holds `log/` (the
 * storage log) and `objects/` (the file-system object store); the storage
 * settings are those rivetkit 3.0 gives a local engine
 * (rivetkit-engine-process 3.0.0, `engine_env`), with the stop budgets short.
 */
export function engineEnv({ arch = "v2", host, guard, apiPeer, metrics, dbPath, dataDir }) {
	checkArch(arch);
	if (arch === "v3") {
		return {
			...common({ host, guard, apiPeer, metrics }),
			RIVET__STORAGE__LOG_DIRECTORY: join(dataDir, "log"),
			RIVET__OBJECT_STORAGE__PRIMARY__FILE_SYSTEM__PATH: join(dataDir, "objects"),
			RIVET__STORAGE__BALANCING__ENABLED: "false",
			RIVET__STORAGE__AUTO_PROVISION_PARTITIONS: "1",
			RIVET__STORAGE__COLD_STORE__DISK_CACHE_BYTES: "0",
			RIVET__STORAGE__WRITE_TO_COLD_AFTER_MS: "5000",
			RIVET__STORAGE__STOP_TIMEOUT_MS: "6000",
			RIVET__STORAGE__STOP_TEARDOWN_MS: "2000",
			RIVET__PEGBOARD__NODE_LOST_THRESHOLD: "7000",
			RIVET__RUNTIME__FORCE_SHUTDOWN_DURATION: "10",
		};
	}
	return {
		...common({ host, guard, apiPeer, metrics }),
		...(dbPath ? { RIVET__FILE_SYSTEM__PATH: dbPath } : {}),
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
		RIVET__RUNTIME__FORCE_SHUTDOWN_DURATION: "2",
	};
}

/**
 * Engine 2.3.19 settings as engine 3.0 names them. Engine 3.0 refuses any
 * `RIVET__*` variable it does not know (as it does config file keys), so a
 * caller's v2 settings are renamed where 3.0 has the same setting, and left
 * out where it has none (`V2_ONLY`).
 */
const V3_RENAMES = {
	RIVET__PEGBOARD__ENVOY_LOST_THRESHOLD: "RIVET__PEGBOARD__NODE_LOST_THRESHOLD",
	RIVET__PEGBOARD__RUNNER_LOST_THRESHOLD: "RIVET__PEGBOARD__NODE_LOST_THRESHOLD",
	RIVET__PEGBOARD__ENVOY_PING_TIMEOUT: "RIVET__PEGBOARD__NODE_PING_TIMEOUT",
	RIVET__PEGBOARD__ENVOY_UPDATE_PING_INTERVAL: "RIVET__PEGBOARD__NODE_UPDATE_PING_INTERVAL",
};
const V2_ONLY = [
	/^RIVET__FILE_SYSTEM__/,
	/^RIVET__FEATURES__/,
	/^RIVET__PEGBOARD__(RUNNER|ENVOY)_ELIGIBLE_THRESHOLD$/,
	/^RIVET__PEGBOARD__RETRY_RESET_DURATION$/,
	/^RIVET__PEGBOARD__BASE_RETRY_TIMEOUT$/,
	/^RIVET__PEGBOARD__RESCHEDULE_BACKOFF_MAX_EXPONENT$/,
	/^RIVET__PEGBOARD__MIN_METADATA_POLL_INTERVAL$/,
	/^RIVET__GUARD__HTTP_MAX_REQUEST_BODY_SIZE$/,
	/^RIVET__PEGBOARD__GATEWAY_HTTP_MAX_REQUEST_BODY_SIZE$/,
];

/** `{env, renamed, dropped}`: `env` with v2 settings renamed or left out for engine 3.0. */
export function v3Env(env) {
	const out = {};
	const renamed = [];
	const dropped = [];
	for (const [key, value] of Object.entries(env)) {
		if (value === undefined) continue;
		if (V2_ONLY.some((re) => re.test(key))) {
			dropped.push(key);
			continue;
		}
		const to = V3_RENAMES[key];
		if (to) renamed.push(`${key} -> ${to}`);
		out[to ?? key] = value;
	}
	return { env: out, renamed, dropped };
}

/** The arch of each endpoint this process started (the API helpers read it). */
const archOf = new Map();

/**
 * Starts an engine and waits until it can serve: `GET /health` ok, then
 * v2: a probe runner-config upsert goes through (removed again); v3: the
 * storage readiness probe (`GET /actors?name=rivetkit-readiness-probe`)
 * answers 200 (400 `depot.overloaded` until storage is up).
 *
 * Returns `{arch, version, binary, endpoint, token, namespace, guardPort,
 * apiPeerPort, metricsPort, dir, logs, pid, logTail, stop}`; `stop()` sends
 * SIGTERM, then SIGKILL after `stopTimeoutMs`, and removes the temporary
 * directory (data, config, logs). Set `KEEP_ENGINE_DIR=1` to keep it.
 *
 * `env` goes on top of the engine's environment; for v3, 2.3.19 settings in
 * it (and in this process's environment) are renamed or left out (`v3Env`,
 * listed in `engine.envNotes`).
 */
export async function startEngine({
	arch = DEFAULT_ARCH,
	healthTimeoutMs = 30_000,
	stopTimeoutMs = arch === "v3" ? 10_000 : 5_000,
	env = {},
} = {}) {
	checkArch(arch);
	const binary = enginePath(arch);
	const { version } = binaryInfo(binary);
	const host = "127.0.0.1";
	const ports = await findFreePorts();
	const dir = mkdtempSync(join(tmpdir(), `${TEMP_PREFIX}engine-${arch}-`));
	const dbPath = join(dir, "db");
	const dataDir = join(dir, "data");
	const configPath = join(dir, "engine.json");
	const logs = { stdout: join(dir, "engine-stdout.log"), stderr: join(dir, "engine-stderr.log") };
	writeFileSync(configPath, JSON.stringify(engineConfig({ host, ...ports }), null, 2));

	// This process's RIVET__* settings go on below ours, as before; the rest
	// of its environment is passed through.
	const inherited = {};
	const rivet = {};
	for (const [key, value] of Object.entries(process.env)) (key.startsWith("RIVET__") ? rivet : inherited)[key] = value;
	let engineVars = { ...rivet, ...engineEnv({ arch, host, ...ports, dbPath, dataDir }), ...env };
	const envNotes = [];
	if (arch === "v3") {
		mkdirSync(join(dataDir, "log"), { recursive: true });
		mkdirSync(join(dataDir, "objects"), { recursive: true });
		const translated = v3Env(engineVars);
		engineVars = translated.env;
		if (translated.renamed.length) envNotes.push(`renamed for engine 3.0: ${translated.renamed.join(", ")}`);
		if (translated.dropped.length)
			envNotes.push(`no such setting on engine 3.0, left out: ${translated.dropped.join(", ")}`);
		if (envNotes.length) writeFileSync(join(dir, "env-notes.txt"), `${envNotes.join("\n")}\n`);
	}
	const args = arch === "v3" ? ["--config", configPath] : ["start", "--config", configPath];

	const stdoutFd = openSync(logs.stdout, "a");
	const stderrFd = openSync(logs.stderr, "a");
	const child = spawn(binary, args, {
		env: { ...inherited, ...engineVars },
		stdio: ["ignore", stdoutFd, stderrFd],
		// Own process group: a terminal's Ctrl-C does not reach it.
		detached: true,
	});
	closeSync(stdoutFd);
	closeSync(stderrFd);
	killOnExit(child);
	let exited = null;
	const exitPromise = once(child, "exit").then(([code, signal]) => {
		exited = { code, signal };
		return exited;
	});

	const endpoint = `http://${host}:${ports.guard}`;
	const logTail = () =>
		(envNotes.length ? `--- harness: ${envNotes.join("; ")} ---\n` : "") +
		`--- engine ${arch} ${version} stderr (${logs.stderr}) ---\n${fileTail(logs.stderr, 40)}\n--- engine stdout ---\n${fileTail(logs.stdout, 40)}`;
	const exitedError = () =>
		new Error(`engine exited during start-up (code ${exited.code}, signal ${exited.signal})\n${logTail()}`);

	let stopped = false;
	const stop = async () => {
		if (stopped) return;
		stopped = true;
		if (!exited) {
			child.kill("SIGTERM");
			const timer = setTimeout(() => {
				if (!exited) child.kill("SIGKILL");
			}, stopTimeoutMs);
			await exitPromise;
			clearTimeout(timer);
		}
		archOf.delete(endpoint);
		if (!process.env.KEEP_ENGINE_DIR) rmSync(dir, { recursive: true, force: true });
	};

	try {
		await waitFor(
			async () => {
				if (exited) throw exitedError();
				try {
					const res = await fetch(`${endpoint}/health`, { signal: AbortSignal.timeout(1_000) });
					if (!res.ok) return false;
					const body = await res.json();
					if (body.status !== "ok") return false;
					const answered = body.architecture === "v3" ? "v3" : "v2";
					// Another engine on the port (a lost race for it) would answer too.
					if (answered !== arch) throw new Error(`/health on ${endpoint} answered as ${answered}, expected ${arch}`);
					return true;
				} catch (err) {
					if (/answered as/.test(err.message)) throw err;
					return false;
				}
			},
			{ timeoutMs: healthTimeoutMs, intervalMs: 100, what: "engine /health" },
		);
		if (arch === "v3") {
			await waitFor(
				async () => {
					if (exited) throw exitedError();
					await apiOnce(endpoint, "GET", READINESS_PROBE);
					return true;
				},
				{ timeoutMs: healthTimeoutMs, intervalMs: 100, what: "engine storage readiness (GET /actors probe)" },
			);
		} else {
			// `/health` answers before the engine can write: wait until a
			// runner-config upsert goes through, then remove the probe.
			const probe = `/runner-configs/${PROBE_POOL}`;
			await waitFor(
				async () => {
					if (exited) throw exitedError();
					await apiOnce(endpoint, "PUT", probe, { datacenters: { default: { normal: {} } } });
					return true;
				},
				{ timeoutMs: healthTimeoutMs, intervalMs: 100, what: "engine API readiness (runner-config upsert)" },
			);
			await api(endpoint, "DELETE", probe);
		}
	} catch (err) {
		await stop();
		if (String(err.message).includes("engine exited")) throw err;
		throw new Error(`${err.message}\n${logTail()}`);
	}
	archOf.set(endpoint, arch);

	return {
		arch,
		// The generation number of an actor's first start: engine 2.3 counts
		// from 1, engine 3.0 from 0.
		firstGeneration: arch === "v3" ? 0 : 1,
		version,
		binary,
		endpoint,
		token: ADMIN_TOKEN,
		namespace: NAMESPACE,
		guardPort: ports.guard,
		apiPeerPort: ports.apiPeer,
		metricsPort: ports.metrics,
		dir,
		logs,
		envNotes,
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

/** The endpoint of `target`: an endpoint string or an engine object. */
const endpointOf = (target) => (typeof target === "string" ? target : target.endpoint);

/**
 * The arch of the engine at `target` (an endpoint or an engine object):
 * known for engines started here, else asked of its `GET /health` (v3 says
 * `"architecture":"v3"`) and remembered.
 */
export async function engineArch(target) {
	if (typeof target === "object" && target.arch) return target.arch;
	const endpoint = endpointOf(target);
	const known = archOf.get(endpoint);
	if (known) return known;
	const res = await fetch(new URL("/health", endpoint), { signal: AbortSignal.timeout(10_000) });
	const body = await res.json().catch(() => ({}));
	const arch = body.architecture === "v3" ? "v3" : "v2";
	archOf.set(endpoint, arch);
	return arch;
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
 * A transient refusal: 5xx, 429, or engine 3.0's overload answer (400
 * `depot.overloaded` with `retry_after_ms`). Resolves to the wait before
 * the next try, or null.
 */
function retryAfter(err) {
	if (!(err instanceof EngineApiError)) return null;
	const hint = Number(err.body?.retry_after_ms ?? err.body?.metadata?.retry_after_ms);
	const overloaded = err.body?.group === "depot" && err.body?.code === "overloaded";
	if (err.status >= 500 || err.status === 429 || overloaded) return Number.isFinite(hint) ? Math.min(hint, 2_000) : 100;
	return null;
}

/**
 * Calls the engine API. Idempotent calls (`retry`) are retried for up to
 * `retryMs` on transient answers: a freshly started engine answers
 * `/health` before it can serve every call (2.3.19: runner-config upserts
 * fail with 500 "replica 1 has not been configured yet" for a moment; 3.0:
 * 400 `depot.overloaded` until its storage is up).
 */
async function api(target, method, path, body, { retry = method !== "POST", retryMs = 10_000 } = {}) {
	const endpoint = endpointOf(target);
	const deadline = Date.now() + retryMs;
	for (;;) {
		try {
			return await apiOnce(endpoint, method, path, body);
		} catch (err) {
			const wait = retryAfter(err);
			// Engine 3.0's overload answer refuses the command before it runs
			// ("the storage host refused the command", e.g. while a storage
			// volume moves just after start): safe to send again, a create too.
			const refused = err.body?.group === "depot" && err.body?.code === "overloaded";
			if (!(retry || refused) || wait === null || Date.now() >= deadline) throw err;
			await new Promise((r) => setTimeout(r, wait));
		}
	}
}

/**
 * The pool `pool` of normal (connected) hosts; required before an envoy of
 * the pool connects. v2: `PUT /runner-configs/{pool}`; v3: `PUT
 * /pools/{pool}` (a pool name must then be a DNS label).
 */
export async function upsertRunnerConfig(target, pool) {
	const path = encodeURIComponent(pool);
	if ((await engineArch(target)) === "v3") return api(target, "PUT", `/pools/${path}`, {});
	return api(target, "PUT", `/runner-configs/${path}`, { datacenters: { default: { normal: {} } } });
}

/** `upsertRunnerConfig` under engine 3.0's name. */
export const upsertPool = upsertRunnerConfig;

/** Removes the pool (v2: its runner config). */
export async function deletePool(target, pool) {
	const path = encodeURIComponent(pool);
	if ((await engineArch(target)) === "v3") return api(target, "DELETE", `/pools/${path}`);
	return api(target, "DELETE", `/runner-configs/${path}`);
}

/**
 * `PUT /runner-configs/{pool}` for a serverless pool (engine 2.3.19): the
 * engine calls `{url}/start` when it needs a host for an actor of the pool
 * (and reads `{url}/metadata` when the config is saved). The body is the
 * one RivetKit's `configurePool` writes. Engine 3.0 has no serverless pools
 * (rivetkit 3.0 disables serverless), so on v3 this throws.
 */
export async function upsertServerlessRunnerConfig(
	target,
	pool,
	url,
	{ requestLifespan = 3600, drainGracePeriod = 30, headers = {} } = {},
) {
	if ((await engineArch(target)) === "v3") {
		throw new Error("serverless pools do not exist on engine 3.0: start this test's engine with { arch: 'v2' }");
	}
	return api(target, "PUT", `/runner-configs/${encodeURIComponent(pool)}`, {
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

/**
 * The connected hosts of `pool`: v2 the envoys of `GET /envoys` whose
 * `pool_name` is `pool`; v3 `GET /pools/{pool}/nodes`. The engine's own
 * objects, whose fields differ between the two.
 */
export async function listEnvoys(target, pool) {
	if ((await engineArch(target)) === "v3") {
		const res = await api(target, "GET", `/pools/${encodeURIComponent(pool)}/nodes`);
		return res.nodes ?? res.envoys ?? [];
	}
	const res = await api(target, "GET", "/envoys");
	return (res.envoys ?? []).filter((e) => pool === undefined || e.pool_name === pool);
}

/** `listEnvoys` under engine 3.0's name. */
export const listNodes = listEnvoys;

async function actorBody(target, { name, key, pool, input }) {
	const body =
		(await engineArch(target)) === "v3"
			? { name, key, pool }
			: { name, key, runner_name_selector: pool, crash_policy: "sleep" };
	if (input !== undefined) {
		const bytes = typeof input === "string" ? Buffer.from(input) : Buffer.from(input);
		body.input = bytes.toString("base64");
	}
	return body;
}

/** `POST /actors`: creates an actor; resolves to the actor object (`actor_id`, ...). */
export async function createActor(target, { name, key, pool, input }) {
	const res = await api(target, "POST", "/actors", await actorBody(target, { name, key, pool, input }));
	return res.actor;
}

/** `PUT /actors`: get-or-create; resolves to `{actor, created}`. */
export async function getOrCreateActor(target, { name, key, pool, input }) {
	return api(target, "PUT", "/actors", await actorBody(target, { name, key, pool, input }));
}

/** `GET /actors?actor_ids=`: the actor object, or `null` if unknown. */
export async function getActor(target, actorId) {
	const res = await api(target, "GET", `/actors?actor_ids=${encodeURIComponent(actorId)}`);
	return res.actors?.[0] ?? null;
}

/** `POST /actors/{id}/sleep`. */
export function sleepActor(target, actorId) {
	return api(target, "POST", `/actors/${encodeURIComponent(actorId)}/sleep`, {});
}

/** `DELETE /actors/{id}`. */
export function destroyActor(target, actorId) {
	return api(target, "DELETE", `/actors/${encodeURIComponent(actorId)}`);
}

/**
 * The headers a client of the gateway sends: the token (engine 3.0 asks
 * every client for one; 2.3 on loopback ignores it), then `headers`.
 */
export function gatewayHeaders(headers = {}) {
	return { "x-rivet-token": ADMIN_TOKEN, ...headers };
}

/** The WebSocket subprotocol that carries the token to the gateway. */
export const TOKEN_PROTOCOL = `rivet_token.${ADMIN_TOKEN}`;

/** `fetch` through the gateway with path routing: `/gateway/{id}{path}`. */
export function gatewayFetch(target, actorId, path = "/", init = {}) {
	const suffix = path.startsWith("/") ? path : `/${path}`;
	return fetch(`${endpointOf(target)}/gateway/${encodeURIComponent(actorId)}${suffix}`, {
		signal: AbortSignal.timeout(60_000),
		...init,
		headers: gatewayHeaders(init.headers),
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
