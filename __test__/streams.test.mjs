// Streamed raw HTTP bodies end to end (docs/streams.md): a RivetKit 2.3.19
// app on this addon (examples/rivetkit-app/test/streams-server.mjs, actor
// `streamer`) behind a real engine's gateway, driven by the official
// client (`handle.fetch`) and by a plain HTTP client for the upload.
//
// - an SSE response's first event reaches the client while the handler is
//   still waiting to write the second one;
// - a large response is delivered chunk by chunk, complete and in order;
// - a 50 MiB upload is read as it arrives: the host's RSS grows by far
//   less than the upload; bodies around the 64 KiB read-ahead arrive whole;
// - the client going away cancels an endless response stream; a stream
//   that errors aborts the response the client reads.

import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { request as httpRequest } from "node:http";
import { after, before, describe, test } from "node:test";

import { engineArchOf, interrupt, startAppWithClient, waitForOutput } from "./helpers/app.mjs";
import { startEngine } from "./helpers/engine.mjs";

const POOL = "streams";
const MiB = 1024 * 1024;
const UPLOAD_BYTES = Number(process.env.UPLOAD_MIB ?? 50) * MiB;

/** The handle of `streamer` `key`, placed by a first call. */
async function placed(client, key) {
	const streamer = client.streamer.getOrCreate([key]);
	await streamer.ping();
	return streamer;
}

/** Reads `reader` until `text` holds `until`; returns what was read. */
async function readUntil(reader, until) {
	const decoder = new TextDecoder();
	let text = "";
	while (!text.includes(until)) {
		const { done, value } = await reader.read();
		if (done) throw new Error(`the body ended before ${JSON.stringify(until)}: ${JSON.stringify(text)}`);
		text += decoder.decode(value, { stream: true });
	}
	return text;
}

/** The resident set of `pid` in bytes (Linux). */
function rss(pid) {
	const line = readFileSync(`/proc/${pid}/status`, "utf8")
		.split("\n")
		.find((l) => l.startsWith("VmRSS:"));
	return Number(line.split(/\s+/)[1]) * 1024;
}

/** POSTs `total` bytes in 1 MiB chunks, chunked, honouring backpressure. */
function upload(url, total) {
	return new Promise((resolve, reject) => {
		const req = httpRequest(url, { method: "POST", headers: { "content-type": "application/octet-stream" } }, (res) => {
			let body = "";
			res.setEncoding("utf8");
			res.on("data", (d) => (body += d));
			res.on("end", () => resolve({ status: res.statusCode, body }));
			res.on("error", reject);
		});
		req.on("error", reject);
		const chunk = Buffer.alloc(MiB, 7);
		let sent = 0;
		const pump = () => {
			while (sent < total) {
				sent += chunk.length;
				if (!req.write(chunk)) return req.once("drain", pump);
			}
			req.end();
		};
		pump();
	});
}

for (const version of ["2", "3"])
	describe(`streamed onRequest bodies through the gateway (RivetKit ${version === "3" ? "3.0.0" : "2.3.19"})`, () => {
		let engine;
		let app;
		let client;

		before(async () => {
			// Engine 2.3 refuses request bodies over 20 MiB by default, streamed
			// or not; this test raises its limits to carry the 50 MiB upload.
			engine = await startEngine({
				arch: engineArchOf(version),
				env: {
					RIVET__GUARD__HTTP_MAX_REQUEST_BODY_SIZE: String(128 * MiB),
					RIVET__PEGBOARD__GATEWAY_HTTP_MAX_REQUEST_BODY_SIZE: String(128 * MiB),
				},
			});
			({ app, client } = await startAppWithClient("test/streams-server.mjs", {
				rivetkit: version,
				engine,
				pool: POOL,
				// The upload handler collects garbage every 8 MiB (see the fixture).
				env: { NODE_OPTIONS: "--expose-gc" },
			}));
		});

		after(async () => {
			if (app && !app.exited) await interrupt(app);
			await engine?.stop();
		});

		test("an SSE response's first event arrives before the handler wrote the rest", async () => {
			const streamer = await placed(client, "sse");
			const res = await streamer.fetch("/sse");
			assert.equal(res.status, 200);
			assert.equal(res.headers.get("content-type"), "text/event-stream");
			const reader = res.body.getReader();
			// The handler waits for /release before it writes the second event.
			const first = await readUntil(reader, "\n\n");
			assert.equal(first, "event: greeting\ndata: first\n\n");
			assert.equal(await (await streamer.fetch("/release")).text(), "released");
			const rest = await readUntil(reader, "data: second\n\n");
			assert.equal(rest, "event: greeting\ndata: second\n\n");
			assert.equal((await reader.read()).done, true);
		});

		test("a 4 MiB response streams complete and in order", async () => {
			const streamer = await placed(client, "download");
			const res = await streamer.fetch("/download?n=64");
			assert.equal(res.status, 200);
			const body = Buffer.from(await res.arrayBuffer());
			assert.equal(body.length, 64 * 64 * 1024);
			for (let i = 0; i < 64; i++) assert.equal(body[i * 64 * 1024], i, `chunk ${i}`);
		});

		test("a 50 MiB upload is read as it arrives, without buffering it whole", {
			// Engine 3.0 ends the upload early (EPIPE at the client) and takes
			// neither of 2.3's body-size settings; its own limit is not known yet.
			skip: version === "3" && "engine 3.0 ends a 50 MiB upload early (docs/streams.md)",
		}, async (t) => {
			const streamer = await placed(client, "upload");
			const actorId = await streamer.resolve();
			const pid = app.child.pid;
			const url = `${engine.endpoint}/gateway/${encodeURIComponent(actorId)}/request/upload`;
			// A small upload first, so one-time growth (code paths first used,
			// allocator arenas) is not counted against the large one.
			const warmup = await upload(url, 8 * MiB);
			assert.equal(JSON.parse(warmup.body).bytes, 8 * MiB);
			const hostBefore = rss(pid);
			const res = await upload(url, UPLOAD_BYTES);
			const hostAfter = rss(pid);
			assert.equal(res.status, 200, res.body);
			const report = JSON.parse(res.body);
			assert.equal(report.bytes, UPLOAD_BYTES);
			assert.ok(report.chunks > 1, `the body arrived in ${report.chunks} chunks`);
			const growth = report.rssPeak - report.rssBefore;
			t.diagnostic(
				`upload ${UPLOAD_BYTES / MiB} MiB in ${report.chunks} chunks: host RSS peak growth during the handler ` +
					`${(growth / MiB).toFixed(1)} MiB; VmRSS ${(hostBefore / MiB).toFixed(1)} -> ${(hostAfter / MiB).toFixed(1)} MiB`,
			);
			assert.ok(growth < 12 * MiB, `RSS grew by ${(growth / MiB).toFixed(1)} MiB during a 50 MiB upload`);
			assert.ok(hostAfter - hostBefore < 12 * MiB, `VmRSS grew by ${((hostAfter - hostBefore) / MiB).toFixed(1)} MiB`);
		});

		test("bodies below, at and above the 64 KiB read ahead arrive whole and in order", async () => {
			const streamer = await placed(client, "digest");
			for (const size of [0, 5, 64 * 1024, 64 * 1024 + 1, 300 * 1024 + 7]) {
				const body = Buffer.alloc(size);
				for (let i = 0; i < size; i++) body[i] = (i * 31 + 7) % 251;
				const res = await streamer.fetch("/digest", { method: "POST", body });
				assert.equal(res.status, 200, `size ${size}`);
				assert.deepEqual(await res.json(), {
					bytes: size,
					sha256: createHash("sha256").update(body).digest("hex"),
				});
			}
		});

		test("a client going away cancels an endless response stream", async () => {
			const streamer = await placed(client, "endless");
			const from = app.out.length;
			const abort = new AbortController();
			const res = await streamer.fetch("/endless", { signal: abort.signal });
			const reader = res.body.getReader();
			await readUntil(reader, "data: 3\n\n");
			abort.abort();
			await reader.read().catch(() => {});
			await waitForOutput(app, /streamer endless endless cancelled after \d+/, { from });
		});

		test("a response stream that errors aborts the body the client reads", async () => {
			const streamer = await placed(client, "fail");
			const res = await streamer.fetch("/fail");
			assert.equal(res.status, 200);
			const reader = res.body.getReader();
			assert.equal(await readUntil(reader, "partial"), "partial");
			assert.equal(await (await streamer.fetch("/release")).text(), "released");
			await assert.rejects(async () => {
				while (!(await reader.read()).done);
			});
			// The actor still answers.
			assert.equal(await streamer.ping(), "pong");
		});
	});
