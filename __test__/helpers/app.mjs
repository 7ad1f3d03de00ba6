// The example app (examples/rivetkit-app, rivetkit 2.3.19 on this addon)
// as a child process, for the serverless and listener tests, plus a
// recording proxy to put between the engine and a serverless host.
//
//   const app = startApp("src/serverless.mjs", { PORT: "8080", ... });
//   await waitForOutput(app, /listening/);
//   ...
//   assertExits(await interrupt(app));

import { spawn } from "node:child_process";
import { once } from "node:events";
import { createServer as createHttpServer, request as httpRequest } from "node:http";
import { createServer } from "node:net";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

import { waitFor } from "./engine.mjs";

export const appDir = fileURLToPath(new URL("../../examples/rivetkit-app/", import.meta.url));

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

/** Runs `script` (relative to the example) with `env` on top of ours. */
export function startApp(script, env = {}) {
	const child = spawn(process.execPath, [join(appDir, script)], {
		cwd: appDir,
		env: { ...process.env, RIVET_LOG_LEVEL: "info", RIVETKIT_ENGINE_SPAWN: "never", ...env },
		stdio: ["ignore", "pipe", "pipe"],
	});
	const app = { child, out: "", exited: null };
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
