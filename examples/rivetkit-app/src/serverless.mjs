// `npm run start:serverless`: the same actors, deployed the serverless way.
//
// `registry.serve()` returns a fetch handler (`{ fetch(request) }`), what a
// serverless platform mounts. Here Node's own http server mounts it on
// PORT (default 8080), so the app runs on any machine. The engine does not
// get a connection from this process until it needs a host for an actor:
// it then calls `POST /api/rivet/start` (the URL of the pool's serverless
// runner config), and the app keeps that request open while the actor runs.
//
// `registry.serve()` installs no signal handlers (platforms own their
// signals), so this file does: Ctrl-C stops taking requests, drains the
// registry (every actor goes to sleep, its state saved), and the process
// then ends by itself.

import { createServer } from "node:http";

import { registry } from "./registry.mjs";

const port = Number(process.env.PORT ?? 8080);
const host = process.env.HOST ?? "127.0.0.1";
const { fetch } = registry.serve();

/** A fetch `Request` for a Node request (its body read whole). */
async function toRequest(req, signal) {
	const url = new URL(req.url ?? "/", `http://${req.headers.host ?? `${host}:${port}`}`);
	const headers = new Headers();
	for (const [name, value] of Object.entries(req.headers)) {
		if (Array.isArray(value)) for (const v of value) headers.append(name, v);
		else if (value !== undefined) headers.set(name, value);
	}
	let body;
	if (req.method !== "GET" && req.method !== "HEAD") {
		const chunks = [];
		for await (const chunk of req) chunks.push(chunk);
		body = Buffer.concat(chunks);
	}
	return new Request(url, { method: req.method, headers, body, signal });
}

const server = createServer(async (req, res) => {
	// Aborted when the client goes away before the response is complete.
	const abort = new AbortController();
	res.on("close", () => abort.abort());
	try {
		const response = await fetch(await toRequest(req, abort.signal));
		res.writeHead(response.status, Object.fromEntries(response.headers));
		if (response.body) {
			// Each chunk is written as it comes: an event stream flushes.
			for await (const chunk of response.body) res.write(chunk);
		}
		res.end();
	} catch (error) {
		if (!res.headersSent) res.writeHead(500, { "content-type": "text/plain" });
		res.end(abort.signal.aborted ? undefined : "Internal Server Error");
		if (!abort.signal.aborted) console.error("request failed", error);
	}
});

server.listen(port, host, () => {
	console.log(`serverless handler listening on http://${host}:${port}/api/rivet`);
});

let stopping = false;
for (const signal of ["SIGINT", "SIGTERM"]) {
	process.on(signal, async () => {
		if (stopping) process.exit(1);
		stopping = true;
		server.close();
		await registry.shutdown();
		// The engine's start requests ended with the drain; whatever is
		// still open is idle.
		server.closeAllConnections();
	});
}
