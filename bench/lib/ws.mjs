// A minimal actor-connect client over a plain WebSocket (`ws`), for
// benchmarks: no reconnects, no queueing, no client-side state beyond the
// pending actions, so what it measures is the gateway and the host.
//
//   const conn = await connectActor(engine.endpoint, actorId, { encoding: "json" });
//   await conn.action("echo", [1]);
//   conn.subscribe("msg");
//   conn.onEvent = (name, args, receivedAt) => { ... };
//   await conn.close();
//
// Frames follow ../shared/spec/websocket-actor-connect.md §4: JSON as text
// (`{"body":{"tag","val"}}`, ids as `["$BigInt","7"]`), CBOR as binary.

import { decode, encode } from "cbor-x";
import WebSocket from "ws";

const ENCODERS = {
	json: {
		action: (id, name, args) => [
			JSON.stringify({ body: { tag: "ActionRequest", val: { id: ["$BigInt", String(id)], name, args } } }),
			false,
		],
		subscribe: (eventName, subscribe) => [
			JSON.stringify({ body: { tag: "SubscriptionRequest", val: { eventName, subscribe } } }),
			false,
		],
		decode: (bytes) => JSON.parse(bytes.toString("utf8")).body,
	},
	cbor: {
		action: (id, name, args) => [encode({ body: { tag: "ActionRequest", val: { id, name, args } } }), true],
		subscribe: (eventName, subscribe) => [
			encode({ body: { tag: "SubscriptionRequest", val: { eventName, subscribe } } }),
			true,
		],
		decode: (bytes) => decode(bytes).body,
	},
};

const idNumber = (id) => (Array.isArray(id) ? Number(id[1]) : Number(id));

/**
 * Opens `/gateway/<actorId>/connect` through the gateway at `endpoint` and
 * resolves once `Init` arrived: `{actorId, connectionId, action, subscribe,
 * onEvent, close}`.
 */
export function connectActor(endpoint, actorId, { encoding = "json", timeoutMs = 30_000 } = {}) {
	const codec = ENCODERS[encoding];
	if (!codec) throw new Error(`bench ws: unsupported encoding ${encoding}`);
	const url = `${endpoint.replace(/^http/, "ws")}/gateway/${encodeURIComponent(actorId)}/connect`;
	const ws = new WebSocket(url, ["rivet", `rivet_encoding.${encoding}`]);
	ws.binaryType = "nodebuffer";
	const pending = new Map();
	let nextId = 0;
	let closed = null;

	const conn = {
		actorId,
		connectionId: null,
		/** Called as `onEvent(name, args, receivedAt)` for every `Event`. */
		onEvent: null,
		/** Runs action `name`; resolves to its output, rejects with its Error frame. */
		action(name, args = []) {
			if (closed) return Promise.reject(new Error(`connection closed (${closed})`));
			const id = nextId++;
			const [payload, binary] = codec.action(id, name, args);
			return new Promise((resolve, reject) => {
				pending.set(id, { resolve, reject });
				ws.send(payload, { binary });
			});
		},
		/** Subscribes to (or unsubscribes from) event `name`; there is no reply. */
		subscribe(name, subscribe = true) {
			const [payload, binary] = codec.subscribe(name, subscribe);
			ws.send(payload, { binary });
		},
		close() {
			if (ws.readyState === WebSocket.CLOSED) return Promise.resolve();
			return new Promise((resolve) => {
				ws.once("close", resolve);
				ws.close(1000, "bench done");
			});
		},
	};

	return new Promise((resolve, reject) => {
		const timer = setTimeout(() => {
			reject(new Error(`bench ws: no Init within ${timeoutMs} ms`));
			ws.terminate();
		}, timeoutMs);
		ws.on("message", (bytes) => {
			const receivedAt = performance.now();
			let body;
			try {
				body = codec.decode(bytes);
			} catch (err) {
				ws.close(1003, "bench: undecodable frame");
				return reject(err);
			}
			switch (body.tag) {
				case "Init":
					clearTimeout(timer);
					conn.connectionId = body.val.connectionId;
					resolve(conn);
					break;
				case "ActionResponse": {
					const id = idNumber(body.val.id);
					pending.get(id)?.resolve(body.val.output);
					pending.delete(id);
					break;
				}
				case "Event":
					conn.onEvent?.(body.val.name, body.val.args, receivedAt);
					break;
				case "Error": {
					const err = new Error(`${body.val.group}.${body.val.code}: ${body.val.message}`);
					if (body.val.actionId === null || body.val.actionId === undefined) {
						clearTimeout(timer);
						reject(err);
					} else {
						const id = idNumber(body.val.actionId);
						pending.get(id)?.reject(err);
						pending.delete(id);
					}
					break;
				}
			}
		});
		ws.on("unexpected-response", (_req, res) => {
			clearTimeout(timer);
			reject(new Error(`bench ws: upgrade answered HTTP ${res.statusCode}`));
		});
		ws.on("error", (err) => {
			clearTimeout(timer);
			reject(err);
		});
		ws.on("close", (code, reason) => {
			clearTimeout(timer);
			closed = `${code} ${reason}`;
			const err = new Error(`connection closed (${closed})`);
			for (const { reject: fail } of pending.values()) fail(err);
			pending.clear();
			reject(err);
		});
	});
}
