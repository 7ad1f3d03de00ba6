// Bad input on the actor-connect WebSocket, sent by a plain WebSocket
// client (`ws`) through the real engine's gateway: every case checks the
// Error frame and/or the close code and reason of
// ../shared/spec/websocket-actor-connect.md §2–§4 and errors.md §6, and that
// the actor and its other open connection keep working.
//
// Frames are built and decoded here: JSON (`{"body":{"tag","val"}}`, ids as
// `["$BigInt","7"]`), CBOR (cbor-x) and BARE (vbare v4, just enough of the
// client protocol).

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import WebSocket from "ws";

import { getOrCreateActor, startEngine, TOKEN_PROTOCOL, waitFor } from "./helpers/engine.mjs";
import { native, serveActors } from "./helpers/actors.mjs";
import {
	BareReader,
	ENCODINGS,
	bareData as data,
	bareStr as str,
	bareUint as uint,
	cborDecode,
	cborEncode,
	vbare,
} from "./helpers/client.mjs";

/** `maxOutgoingMessageSize` of the test actor. */
const MAX_OUTGOING = 1024;
/** The core's default `max_incoming_message_size`. */
const MAX_INCOMING = 65_536;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
const FRAME_TIMEOUT_MS = 15_000;

/** A BARE `ToClient` → `{tag, val}` with CBOR payloads decoded and ids as Numbers. */
function decodeBareToClient(bytes) {
	const r = new BareReader(bytes);
	const version = r.u16le();
	assert.equal(version, 4, "the server writes client protocol v4");
	const tag = Number(r.uint());
	switch (tag) {
		case 0:
			return { tag: "Init", val: { actorId: r.str(), connectionId: r.str() } };
		case 1: {
			const val = { group: r.str(), code: r.str(), message: r.str() };
			val.metadata = r.optional(() => cborDecode(r.data()), null);
			val.actionId = r.optional(() => Number(r.uint()), null);
			val.actor = r.optional(
				() => ({ actorId: r.str(), generation: Number(r.uint()), key: r.optional(() => r.str(), null) }),
				null,
			);
			return { tag: "Error", val };
		}
		case 2:
			return { tag: "ActionResponse", val: { id: Number(r.uint()), output: cborDecode(r.data()) } };
		case 3:
			return { tag: "Event", val: { name: r.str(), args: cborDecode(r.data()) } };
		default:
			throw new Error(`unknown ToClient tag ${tag}`);
	}
}

// --- frames in each encoding -------------------------------------------------

/** `ActionRequest{id, name, args}` as the client would send it: `[data, binary]`. */
function actionRequest(encoding, id, name, args) {
	switch (encoding) {
		case "json":
			return [
				JSON.stringify({ body: { tag: "ActionRequest", val: { id: ["$BigInt", String(id)], name, args } } }),
				false,
			];
		case "cbor":
			return [cborEncode({ body: { tag: "ActionRequest", val: { id, name, args } } }), true];
		case "bare":
			return [vbare(Buffer.concat([uint(0), uint(id), str(name), data(cborEncode(args))])), true];
		default:
			throw new Error(`unknown encoding ${encoding}`);
	}
}

/** `SubscriptionRequest{eventName, subscribe}`: `[data, binary]`. */
function subscriptionRequest(encoding, eventName, subscribe) {
	switch (encoding) {
		case "json":
			return [JSON.stringify({ body: { tag: "SubscriptionRequest", val: { eventName, subscribe } } }), false];
		case "cbor":
			return [cborEncode({ body: { tag: "SubscriptionRequest", val: { eventName, subscribe } } }), true];
		case "bare":
			return [vbare(Buffer.concat([uint(1), str(eventName), Buffer.from([subscribe ? 1 : 0])])), true];
		default:
			throw new Error(`unknown encoding ${encoding}`);
	}
}

/** JSON for assertion messages (CBOR ids decode as BigInt). */
const show = (value) => JSON.stringify(value, (_k, v) => (typeof v === "bigint" ? `${v}n` : v));

/** `BigInt`-compat ids (`["$BigInt","7"]`), CBOR bigints and numbers → Number. */
function idNumber(id) {
	if (Array.isArray(id) && id[0] === "$BigInt") return Number(id[1]);
	if (typeof id === "bigint") return Number(id);
	return id;
}

/** A server frame → `{tag, val, raw}`; checks the frame type of the encoding (§3.2). */
function decodeToClient(encoding, bytes, isBinary) {
	if (encoding === "json") {
		assert.equal(isBinary, false, "JSON frames are text frames");
		const raw = JSON.parse(Buffer.from(bytes).toString("utf8"));
		return { tag: raw.body.tag, val: raw.body.val, raw };
	}
	assert.equal(isBinary, true, `${encoding} frames are binary frames`);
	if (encoding === "cbor") {
		const raw = cborDecode(Buffer.from(bytes));
		return { tag: raw.body.tag, val: raw.body.val, raw };
	}
	const msg = decodeBareToClient(bytes);
	return { ...msg, raw: msg };
}

// --- a plain actor-connect socket --------------------------------------------

/**
 * Opens `ws://<guard>/gateway/<actorId>/connect` offering `rivet` and
 * `rivet_encoding.<encoding>` (plus `protocols`). Frames are collected from
 * the start; `closed` resolves to `{code, reason}`.
 */
function openSocket(
	engine,
	actorId,
	encoding,
	{ protocols = [], encodingProtocol = `rivet_encoding.${encoding}` } = {},
) {
	const url = `ws://127.0.0.1:${engine.guardPort}/gateway/${encodeURIComponent(actorId)}/connect`;
	const ws = new WebSocket(url, ["rivet", encodingProtocol, TOKEN_PROTOCOL, ...protocols]);
	const frames = [];
	const decodeErrors = [];
	let wake = () => {};
	ws.on("message", (bytes, isBinary) => {
		try {
			frames.push(decodeToClient(encoding, bytes, isBinary));
		} catch (err) {
			decodeErrors.push(err);
		}
		wake();
	});
	let closeInfo = null;
	const closed = new Promise((resolve) => {
		ws.on("close", (code, reason) => {
			closeInfo = { code, reason: reason.toString() };
			wake();
			resolve(closeInfo);
		});
	});
	const opened = new Promise((resolve, reject) => {
		ws.once("open", resolve);
		ws.once("unexpected-response", (_req, res) => reject(new Error(`upgrade answered HTTP ${res.statusCode}`)));
		ws.once("error", reject);
	});
	opened.catch(() => {});
	ws.on("error", () => {});

	let nextId = 1;
	let cursor = 0;
	const socket = {
		ws,
		frames,
		closed,
		opened,
		get closeInfo() {
			return closeInfo;
		},
		/** The first not yet consumed frame matching `predicate`. */
		async frame(predicate = () => true, what = "a frame") {
			const deadline = Date.now() + FRAME_TIMEOUT_MS;
			for (;;) {
				if (decodeErrors.length) throw decodeErrors[0];
				for (let i = cursor; i < frames.length; i++) {
					if (!frames[i].consumed && predicate(frames[i])) {
						frames[i].consumed = true;
						if (i === cursor) cursor++;
						return frames[i];
					}
				}
				if (closeInfo)
					throw new Error(`socket closed (${closeInfo.code} ${closeInfo.reason}) while waiting for ${what}`);
				const left = deadline - Date.now();
				if (left <= 0) throw new Error(`timed out waiting for ${what}`);
				await new Promise((resolve) => {
					const timer = setTimeout(resolve, left);
					wake = () => {
						clearTimeout(timer);
						resolve();
					};
				});
			}
		},
		/** Waits for `Init` (must be the first frame) and returns its `val`. */
		async init() {
			await opened;
			const first = await socket.frame(() => true, "Init");
			assert.equal(first, frames[0], "Init is the first frame");
			assert.equal(first.tag, "Init", `first frame: ${show(first.val)}`);
			return first.val;
		},
		send(payload, binary) {
			ws.send(payload, { binary });
		},
		/** Sends `SubscriptionRequest{eventName, subscribe: true}` (no reply). */
		subscribe(eventName) {
			socket.send(...subscriptionRequest(encoding, eventName, true));
		},
		/** Sends an ActionRequest; resolves to the ActionResponse or Error with its id. */
		async request(name, args = []) {
			const id = nextId++;
			socket.send(...actionRequest(encoding, id, name, args));
			const reply = await socket.frame(
				(f) =>
					(f.tag === "ActionResponse" && idNumber(f.val.id) === id) ||
					(f.tag === "Error" && idNumber(f.val.actionId) === id),
				`the answer to action ${id} (${name})`,
			);
			return { id, ...reply };
		},
		/** Runs an action that must succeed; resolves to its output. */
		async action(name, args = []) {
			const reply = await socket.request(name, args);
			assert.equal(reply.tag, "ActionResponse", `action ${name}: ${show(reply.val)}`);
			return reply.val.output;
		},
		close() {
			if (ws.readyState === WebSocket.OPEN || ws.readyState === WebSocket.CONNECTING) ws.close(1000, "test done");
			return closed;
		},
	};
	return socket;
}

/** Waits for the close and asserts its code and reason. */
async function assertClosed(socket, code, reason, what, timeoutMs = FRAME_TIMEOUT_MS) {
	let timer;
	const timeout = new Promise((_, reject) => {
		timer = setTimeout(() => reject(new Error(`${what}: no close within ${timeoutMs} ms`)), timeoutMs);
	});
	const info = await Promise.race([socket.closed, timeout]).finally(() => clearTimeout(timer));
	assert.equal(info.code, code, `${what}: close code (reason "${info.reason}")`);
	if (reason !== undefined) assert.equal(info.reason, reason, `${what}: close reason`);
	return info;
}

describe("actor-connect: bad input from a plain WebSocket client", () => {
	let engine;
	let host;
	/** Connection ids with a live connection (onConnect without onDisconnect yet). */
	const live = new Set();
	/** Every connection id onConnect saw. */
	const seen = new Set();

	before(async () => {
		engine = await startEngine({ arch: "v3" });
		const chat = new native.NapiActorFactory(
			{
				createState: async () => cborEncode({}),
				onConnect: async (_e, { conn }) => {
					live.add(conn.id());
					seen.add(conn.id());
				},
				onDisconnect: async (_e, { conn }) => {
					live.delete(conn.id());
				},
				actions: {
					add: async (_e, { args }) => {
						const [a, b] = cborDecode(args);
						return cborEncode(a + b);
					},
					// Broadcasts `shout` with a string of `size` characters.
					shout: async (_e, { ctx, args }) => {
						const [size] = cborDecode(args);
						ctx.broadcast("shout", cborEncode(["z".repeat(size)]));
						return cborEncode(true);
					},
					// A CBOR value bigger than the actor's outgoing limit.
					big: async (_e, { args }) => {
						const [size] = cborDecode(args);
						return cborEncode({ text: "x".repeat(size) });
					},
				},
			},
			{ maxOutgoingMessageSize: MAX_OUTGOING, sleepTimeoutMs: 300_000 },
		);
		host = await serveActors(engine, { chat });
	});

	after(async () => {
		await host?.stop();
		await engine?.stop();
	});

	let keyCounter = 0;
	/** A fresh `chat` actor (get-or-create by key); resolves to its id. */
	async function freshActor() {
		keyCounter += 1;
		const { actor } = await getOrCreateActor(engine.endpoint, {
			name: "chat",
			key: `frames-${keyCounter}`,
			pool: host.pool,
		});
		return actor.actor_id;
	}

	/**
	 * Opens a good connection ("the other one") and runs an action on it,
	 * then `misbehave(actorId)`, then checks that the other connection still
	 * answers, that a new connection to the actor works, and that the bad
	 * connection (when it got as far as Init) was disconnected.
	 */
	async function withBystander(encoding, misbehave) {
		const actorId = await freshActor();
		const other = openSocket(engine, actorId, encoding);
		let badConnId;
		try {
			const init = await other.init();
			assert.equal(init.actorId, actorId);
			assert.equal(await other.action("add", [1, 2]), 3);
			badConnId = await misbehave(actorId);
			assert.equal(await other.action("add", [20, 22]), 42, "the other connection still answers");
			assert.equal(other.closeInfo, null, "the other connection is still open");

			const fresh = openSocket(engine, actorId, encoding);
			try {
				await fresh.init();
				assert.equal(await fresh.action("add", [2, 2]), 4, "a new connection to the actor works");
			} finally {
				await fresh.close();
			}
			if (badConnId) {
				assert.ok(seen.has(badConnId), "onConnect ran for the bad connection");
				await waitFor(() => !live.has(badConnId), { what: "onDisconnect of the closed connection" });
			}
			assert.ok(live.has(init.connectionId), "the other connection is still registered");
		} finally {
			await other.close();
		}
	}

	test("the first frame of a good connection is Init{actorId, connectionId} (each encoding)", async () => {
		const actorId = await freshActor();
		for (const encoding of ENCODINGS) {
			const socket = openSocket(engine, actorId, encoding);
			try {
				const init = await socket.init();
				assert.deepEqual(Object.keys(init).sort(), ["actorId", "connectionId"]);
				assert.equal(init.actorId, actorId);
				assert.match(init.connectionId, UUID);
				if (encoding === "json") {
					assert.deepEqual(socket.frames[0].raw, { body: { tag: "Init", val: init } });
				}
				// JSON ids travel as ["$BigInt", "<id>"].
				const reply = await socket.request("add", [5, 6]);
				assert.equal(reply.tag, "ActionResponse");
				if (encoding === "json") assert.deepEqual(reply.val.id, ["$BigInt", String(reply.id)]);
				assert.equal(reply.val.output, 11);
			} finally {
				await socket.close();
			}
		}
	});

	test("json: a malformed JSON text frame closes 1011 actor.invalid_request", async () => {
		await withBystander("json", async (actorId) => {
			const bad = openSocket(engine, actorId, "json");
			const { connectionId } = await bad.init();
			bad.send('{"body":{"tag":"ActionRequest","val":{"id":', false);
			await assertClosed(bad, 1011, "actor.invalid_request", "malformed JSON");
			return connectionId;
		});
	});

	test("json: a well-formed frame of the wrong shape closes 1011 actor.invalid_request", async () => {
		await withBystander("json", async (actorId) => {
			const bad = openSocket(engine, actorId, "json");
			const { connectionId } = await bad.init();
			// `args` is required (spec §4.1).
			bad.send(JSON.stringify({ body: { tag: "ActionRequest", val: { id: ["$BigInt", "1"], name: "add" } } }), false);
			await assertClosed(bad, 1011, "actor.invalid_request", "ActionRequest without args");
			return connectionId;
		});
	});

	test("json: text and binary frames are decoded alike", async () => {
		const actorId = await freshActor();
		const socket = openSocket(engine, actorId, "json");
		try {
			await socket.init();
			socket.send(Buffer.from(actionRequest("json", 99, "add", [4, 5])[0]), true);
			const reply = await socket.frame(
				(f) => f.tag === "ActionResponse" || f.tag === "Error",
				"the answer to a binary JSON frame",
			);
			assert.equal(reply.tag, "ActionResponse", show(reply.val));
			assert.deepEqual(reply.val.id, ["$BigInt", "99"]);
			assert.equal(reply.val.output, 9);
		} finally {
			await socket.close();
		}
	});

	test("cbor: a malformed CBOR binary frame closes 1011 actor.invalid_request", async () => {
		await withBystander("cbor", async (actorId) => {
			const bad = openSocket(engine, actorId, "cbor");
			const { connectionId } = await bad.init();
			// A map of one entry whose key is cut short.
			bad.send(Buffer.from([0xa1, 0x64, 0x62, 0x6f]), true);
			await assertClosed(bad, 1011, "actor.invalid_request", "malformed CBOR");
			return connectionId;
		});
	});

	test("cbor: a byte string in args closes 1011 actor.invalid_request", async () => {
		await withBystander("cbor", async (actorId) => {
			const bad = openSocket(engine, actorId, "cbor");
			const { connectionId } = await bad.init();
			bad.send(
				cborEncode({ body: { tag: "ActionRequest", val: { id: 1, name: "add", args: [new Uint8Array([1, 2])] } } }),
				true,
			);
			await assertClosed(bad, 1011, "actor.invalid_request", "byte string in CBOR args");
			return connectionId;
		});
	});

	test("bare: a malformed BARE binary frame closes 1011 actor.invalid_request", async () => {
		await withBystander("bare", async (actorId) => {
			const bad = openSocket(engine, actorId, "bare");
			const { connectionId } = await bad.init();
			// v4, ActionRequest, id 1, then a name whose length runs past the end.
			bad.send(vbare(Buffer.from([0x00, 0x01, 0x20, 0x61])), true);
			await assertClosed(bad, 1011, "actor.invalid_request", "malformed BARE");
			return connectionId;
		});
	});

	test("bare: an unknown union tag closes 1011 actor.invalid_request", async () => {
		await withBystander("bare", async (actorId) => {
			const bad = openSocket(engine, actorId, "bare");
			const { connectionId } = await bad.init();
			bad.send(vbare(Buffer.from([0x07])), true);
			await assertClosed(bad, 1011, "actor.invalid_request", "unknown BARE tag");
			return connectionId;
		});
	});

	test("cbor: a JSON text frame on a cbor connection closes 1011 actor.invalid_request", async () => {
		await withBystander("cbor", async (actorId) => {
			const bad = openSocket(engine, actorId, "cbor");
			const { connectionId } = await bad.init();
			bad.send(actionRequest("json", 1, "add", [1, 2])[0], false);
			await assertClosed(bad, 1011, "actor.invalid_request", "JSON on a cbor connection");
			return connectionId;
		});
	});

	test("bare: a CBOR frame on a bare connection closes 1011 actor.invalid_request", async () => {
		await withBystander("bare", async (actorId) => {
			const bad = openSocket(engine, actorId, "bare");
			const { connectionId } = await bad.init();
			bad.send(actionRequest("cbor", 1, "add", [1, 2])[0], true);
			await assertClosed(bad, 1011, "actor.invalid_request", "CBOR on a bare connection");
			return connectionId;
		});
	});

	test("rivet_encoding.xml closes 1003 actor.unsupported_websocket_encoding", async () => {
		await withBystander("json", async (actorId) => {
			const bad = openSocket(engine, actorId, "json", { encodingProtocol: "rivet_encoding.xml" });
			await assertClosed(bad, 1003, "actor.unsupported_websocket_encoding", "unknown encoding");
			assert.equal(bad.frames.length, 0, "no frame before the close");
			return undefined;
		});
	});

	// The reference fails the host's WebSocket callback here (close 1011
	// "Server Error" before any open), which the engine 2.3.19 gateway
	// retries for about 19 s before the client sees an opaque
	// `guard.websocket_closed_before_open`. We accept the socket and close
	// it at once with the reason instead.
	test("invalid rivet_conn_params (not JSON) closes 1011 protocol.invalid_actor_connect_request", async () => {
		await withBystander("json", async (actorId) => {
			const liveBefore = live.size;
			const bad = openSocket(engine, actorId, "json", {
				protocols: [`rivet_conn_params.${encodeURIComponent("not json")}`],
			});
			await assertClosed(bad, 1011, "protocol.invalid_actor_connect_request", "bad conn params");
			assert.ok(
				bad.frames.every((f) => f.tag !== "Init"),
				"no Init for a refused connection",
			);
			assert.equal(live.size, liveBefore, "no connection was set up");
			return undefined;
		});
	});

	for (const encoding of ENCODINGS) {
		test(`${encoding}: a frame over ${MAX_INCOMING} bytes closes 1011 message.incoming_too_long`, async () => {
			await withBystander(encoding, async (actorId) => {
				const bad = openSocket(engine, actorId, encoding);
				const { connectionId } = await bad.init();
				// A well-formed request whose size alone is wrong.
				const [payload, binary] = actionRequest(encoding, 1, "add", ["y".repeat(MAX_INCOMING + 16), 1]);
				assert.ok(payload.length > MAX_INCOMING);
				bad.send(payload, binary);
				await assertClosed(bad, 1011, "message.incoming_too_long", "oversized frame");
				assert.ok(
					bad.frames.every((f) => f.tag !== "ActionResponse" && f.tag !== "Error"),
					"the oversized request got no answer",
				);
				return connectionId;
			});
		});

		test(`${encoding}: an unknown action answers Error action_not_found with the action id; the socket stays open`, async () => {
			await withBystander(encoding, async (actorId) => {
				const socket = openSocket(engine, actorId, encoding);
				const { connectionId } = await socket.init();
				assert.equal(await socket.action("add", [1, 1]), 2);
				const reply = await socket.request("nope", [1]);
				assert.equal(reply.tag, "Error", show(reply.val));
				assert.equal(reply.val.group, "actor");
				assert.equal(reply.val.code, "action_not_found");
				assert.equal(idNumber(reply.val.actionId), reply.id);
				if (encoding === "json") assert.deepEqual(reply.val.actionId, ["$BigInt", String(reply.id)]);
				if (encoding === "cbor") {
					// Spec §4.2: keys in this order; ids as 64-bit unsigned (0x1b), which cbor-x reads as BigInt.
					const keys = Object.keys(reply.val).filter((k) => k !== "metadata");
					assert.deepEqual(keys, ["group", "code", "message", "actor", "actionId"]);
					assert.equal(typeof reply.val.actionId, "bigint");
					assert.equal(typeof reply.val.actor.generation, "bigint");
				}
				assert.equal(reply.val.message, "Action `nope` was not found.");
				assert.equal(reply.val.actor?.actorId, actorId, "the error names the actor");
				assert.equal(await socket.action("add", [3, 4]), 7, "a later action on the same connection works");
				assert.equal(socket.closeInfo, null);
				await socket.close();
				return connectionId;
			});
		});

		test(`${encoding}: an action output over maxOutgoingMessageSize answers Error message.outgoing_too_long`, async () => {
			await withBystander(encoding, async (actorId) => {
				const socket = openSocket(engine, actorId, encoding);
				const { connectionId } = await socket.init();
				// Just under the limit still goes out.
				const ok = await socket.request("big", [MAX_OUTGOING - 200]);
				assert.equal(ok.tag, "ActionResponse", show(ok.val));
				assert.equal(ok.val.output.text.length, MAX_OUTGOING - 200);

				const reply = await socket.request("big", [MAX_OUTGOING * 2]);
				assert.equal(reply.tag, "Error", `expected an Error, got ${reply.tag}`);
				assert.equal(reply.val.group, "message");
				assert.equal(reply.val.code, "outgoing_too_long");
				assert.equal(reply.val.message, "Outgoing message too long");
				assert.equal(idNumber(reply.val.actionId), reply.id);
				if (encoding === "cbor") assert.deepEqual(Object.keys(reply.val), ["group", "code", "message", "actionId"]);
				assert.equal(await socket.action("add", [5, 5]), 10, "the connection stays usable");
				assert.equal(socket.closeInfo, null);
				await socket.close();
				return connectionId;
			});
		});

		test(`${encoding}: a broadcast event over maxOutgoingMessageSize closes its subscriber 1011 message.outgoing_too_long`, async () => {
			await withBystander(encoding, async (actorId) => {
				const listener = openSocket(engine, actorId, encoding);
				const { connectionId } = await listener.init();
				listener.subscribe("shout");
				// An action round trip after the subscription: it was handled (in order).
				assert.equal(await listener.action("add", [0, 0]), 0);
				const caller = openSocket(engine, actorId, encoding);
				try {
					await caller.init();
					assert.equal(await caller.action("shout", [10]), true);
					const small = await listener.frame((f) => f.tag === "Event", "the small event");
					assert.equal(small.val.name, "shout");
					assert.deepEqual(small.val.args, ["z".repeat(10)]);

					assert.equal(
						await caller.action("shout", [MAX_OUTGOING * 2]),
						true,
						"the broadcasting action itself succeeds",
					);
					await assertClosed(listener, 1011, "message.outgoing_too_long", "oversize event");
					assert.equal(await caller.action("add", [1, 1]), 2, "the caller (not subscribed) is unaffected");
				} finally {
					await caller.close();
				}
				return connectionId;
			});
		});
	}
});
