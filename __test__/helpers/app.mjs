// The example app as a child process, for the tests that run a RivetKit
// app, plus a recording proxy to put between the engine and a serverless
// host. Two installs of one app:
//
// - rivetkit "2": examples/rivetkit-app (rivetkit 2.3.19 on this addon);
// - rivetkit "3": examples/rivetkit-app-3 (rivetkit 3.0.0 on this addon),
//   whose src/ and test/ are copies of the first's
//   (examples/rivetkit-app-3/share.mjs), brought up to date at each start.
//
// `napi: "reference"` runs the app on the official @rivetkit/rivetkit-napi
// of that rivetkit version instead (2.3.19: the root's devDependency; 3.0.0:
// the root's `rivetkit-napi-3`, through examples/rivetkit-app-3/.reference),
// to compare with the reference stack.
//
//   const app = startApp("src/serverless.mjs", { PORT: "8080", ... });
//   const app3 = startApp("src/server.mjs", { RIVET_ENDPOINT: ... }, { rivetkit: "3" });
//   await waitForOutput(app, /listening/);
//   ...
//   assertExits(await interrupt(app));
//
// RIVETKIT_TEST_RIVETKIT=3 makes "3" the default of a run.

import { spawn } from "node:child_process";
import { once } from "node:events";
import { createServer as createHttpServer, request as httpRequest } from "node:http";
import { createServer } from "node:net";
import { join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

import { referenceDir, shareSources } from "../../examples/rivetkit-app-3/share.mjs";
import { waitFor } from "./engine.mjs";

/** The example's directory for each rivetkit version. */
export const appDirs = Object.freeze({
	2: fileURLToPath(new URL("../../examples/rivetkit-app/", import.meta.url)),
	3: fileURLToPath(new URL("../../examples/rivetkit-app-3/", import.meta.url)),
});
/** The rivetkit version of `startApp()` without one. */
export const DEFAULT_RIVETKIT = process.env.RIVETKIT_TEST_RIVETKIT || "2";
if (!(DEFAULT_RIVETKIT in appDirs)) throw new Error(`RIVETKIT_TEST_RIVETKIT must be 2 or 3, got ${DEFAULT_RIVETKIT}`);
/** The example of the default rivetkit version. */
export const appDir = appDirs[DEFAULT_RIVETKIT];

/**
 * The directory to run the app from: `rivetkit` "2" or "3", on this addon
 * (`napi: "ours"`) or on the official napi of that version
 * (`napi: "reference"`). For "3" the shared sources are synced first.
 */
export function appDirFor({ rivetkit = DEFAULT_RIVETKIT, napi = "ours" } = {}) {
	const version = String(rivetkit);
	if (!(version in appDirs)) throw new Error(`rivetkit must be "2" or "3", got ${rivetkit}`);
	if (napi !== "ours" && napi !== "reference") throw new Error(`napi must be "ours" or "reference", got ${napi}`);
	if (version === "3") {
		shareSources();
		return napi === "reference" ? referenceDir() : appDirs[3];
	}
	// rivetkit 2.3.19 on the official napi: the root's own rivetkit and
	// @rivetkit/rivetkit-napi (devDependencies) with the example's files.
	if (napi === "reference") throw new Error('napi: "reference" is built for rivetkit "3" only');
	return appDirs[2];
}

/** A TCP port free on 127.0.0.1 right now. */
export function freePort() {
	return new Promise((resolve, reject) => {
		const server = createServer();
		server.once("error", reject);
		server.listen(0, "127.0.0.1", () => {
			const { port } = server.address();
			server.close(() => resolve(port));
		});
	});
}

/**
 * Runs `script` (relative to the example) with `env` on top of ours.
 * `options`: `rivetkit` ("2" or "3", default DEFAULT_RIVETKIT) and `napi`
 * ("ours" or "reference"), see `appDirFor`. The app object says which
 * (`app.rivetkit`, `app.napi`, `app.dir`).
 */
export function startApp(script, env = {}, { rivetkit = DEFAULT_RIVETKIT, napi = "ours" } = {}) {
	const dir = appDirFor({ rivetkit, napi });
	const child = spawn(process.execPath, [join(dir, script)], {
		cwd: dir,
		env: { ...process.env, RIVET_LOG_LEVEL: "info", RIVETKIT_ENGINE_SPAWN: "never", ...env },
		stdio: ["ignore", "pipe", "pipe"],
	});
	const app = { child, out: "", exited: null, rivetkit: String(rivetkit), napi, dir };
	child.stdout.on("data", (d) => (app.out += d));
	child.stderr.on("data", (d) => (app.out += d));
	app.exit = once(child, "exit").then(([code, signal]) => (app.exited = { code, signal }));
	return app;
}

/** Resolves to the index just after the first match of `re` at or after `from`. */
export async function waitForOutput(app, re, { from = 0, timeoutMs = 60_000 } = {}) {
	const find = () => {
		const m = re.exec(app.out.slice(from));
		return m ? from + m.index + m[0].length : 0;
	};
	try {
		await waitFor(() => find() || app.exited, { timeoutMs, what: `output ${re}` });
	} catch (err) {
		// Keep what the app said meanwhile: the cause of a rare failure is in it.
		err.message += `\nthe app's output since the wait began (last 8 KiB):\n${app.out.slice(from).slice(-8192)}`;
		throw err;
	}
	const at = find();
	if (!at) throw new Error(`the app exited (${JSON.stringify(app.exited)}) while waiting for ${re}:\n${app.out}`);
	return at;
}

/**
 * Sends `signal` and waits for the exit, SIGKILL after `boundMs`. Resolves
 * to `{code, signal, killed}`.
 */
export async function interrupt(app, { signal = "SIGINT", boundMs = 20_000 } = {}) {
	let killed = false;
	app.child.kill(signal);
	const timer = setTimeout(() => {
		killed = true;
		app.child.kill("SIGKILL");
	}, boundMs);
	await app.exit;
	clearTimeout(timer);
	return { ...app.exited, killed };
}

/** An assertion for `assert.rejects`: the error is `group.code`. */
export const isError = (group, code) => (err) => {
	if (`${err.group}.${err.code}` !== `${group}.${code}`) {
		throw new Error(`expected ${group}.${code}, got ${err.group}.${err.code}: ${err.message}`);
	}
	return true;
};

/**
 * An HTTP proxy on a free port in front of `target` (`http://host:port`)
 * that records every request and the chunks of every response as they
 * arrive: `{url, requests, close}` where each request is `{method, path,
 * headers, body, chunks: [{text, ended}], ended, closedByClient}`: `ended` once
 * the target ended its response, `closedByClient` once the client closed the
 * request first (the engine closes a start stream as soon as it reads its
 * `stopping`, which races the target's own end).
 */
export async function recordingProxy(target) {
	const requests = [];
	const server = createHttpServer((req, res) => {
		const record = {
			method: req.method,
			path: req.url,
			headers: { ...req.headers },
			body: null,
			chunks: [],
			status: null,
			ended: false,
			closedByClient: false,
		};
		requests.push(record);
		const body = [];
		req.on("data", (d) => body.push(d));
		req.on("end", () => {
			record.body = Buffer.concat(body);
			const upstream = httpRequest(new URL(req.url, target), { method: req.method, headers: req.headers }, (up) => {
				record.status = up.statusCode;
				res.writeHead(up.statusCode, up.headers);
				up.on("data", (chunk) => {
					record.chunks.push(chunk.toString("utf8"));
					res.write(chunk);
				});
				up.on("end", () => {
					record.ended = true;
					res.end();
				});
				up.on("error", () => res.destroy());
			});
			upstream.on("error", (err) => {
				record.error = String(err);
				if (!res.headersSent) res.writeHead(502);
				res.end();
			});
			res.on("close", () => {
				if (!record.ended) record.closedByClient = true;
				upstream.destroy();
			});
			upstream.end(record.body);
		});
	});
	server.listen(0, "127.0.0.1");
	await once(server, "listening");
	const url = `http://127.0.0.1:${server.address().port}`;
	return {
		url,
		requests,
		close: () =>
			new Promise((resolve) => {
				server.closeAllConnections();
				server.close(() => resolve());
			}),
	};
}

/** The engine each RivetKit version runs on (the harness's `arch`). */
export const engineArchOf = (rivetkit) => (String(rivetkit) === "3" ? "v3" : "v2");

/**
 * `createClient` of the official client of `rivetkit` ("2" or "3"): the
 * root's devDependency for 2.3.19, the 3.0 example's own install for 3.0.
 * The client entry point never loads a napi addon.
 */
export async function clientFor(rivetkit) {
	if (String(rivetkit) === "3") {
		shareSources();
		const entry = join(appDirs[3], "node_modules/rivetkit/dist/tsup/client/mod.js");
		return (await import(pathToFileURL(entry).href)).createClient;
	}
	return (await import("rivetkit/client")).createClient;
}

/** The environment that points the example app at `engine` and `pool`. */
export const appEnv = (engine, pool) => ({
	RIVET_ENDPOINT: engine.endpoint,
	RIVET_TOKEN: engine.token,
	RIVET_POOL: pool,
});

/**
 * The environment of a host on an engine cluster: its envoy knows every
 * node of `nodes` (`{endpoint}`), `nodes[0]` first (docs/deploy.md), in
 * `pool`, with the admin token `token`; errors exposed, and the envoy
 * client's lines, which name the node it connects to, logged.
 */
export const clusterHostEnv = (nodes, pool, token) => ({
	RIVET_ENDPOINT: nodes[0].endpoint,
	RIVETKIT_ENGINE_ENDPOINTS: nodes
		.slice(1)
		.map((n) => n.endpoint)
		.join(","),
	RIVET_TOKEN: token,
	RIVET_POOL: pool,
	RIVET_EXPOSE_ERRORS: "1",
	RIVET_LOG_LEVEL: process.env.CLUSTER_LOG ?? "info,rivet_envoy_client=info",
});

/**
 * Starts `script` of the example of `rivetkit` against `engine` in `pool`
 * (with `env` on top), waits until it serves, and returns `{app, client}`:
 * the client is that version's official one, on the engine's namespace and
 * token.
 */
export async function startAppWithClient(script, { rivetkit, engine, pool, env = {} }) {
	const app = startApp(script, { ...appEnv(engine, pool), ...env }, { rivetkit });
	await waitForOutput(app, /registry serving/);
	return { app, client: await engineClient(rivetkit, engine, pool) };
}

/** The official client of `rivetkit` for `pool` on `engine`, on its namespace and token. */
export async function engineClient(rivetkit, engine, pool) {
	const createClient = await clientFor(rivetkit);
	return createClient({ endpoint: engine.endpoint, namespace: engine.namespace, token: engine.token, poolName: pool });
}
