// Client-side helpers for end-to-end tests of actions: the official
// RivetKit client (`rivetkit/client`), CBOR as RivetKit's runtime writes it,
// and hand-built wire bodies for requests the official client never sends.
//
//   const client = officialClient(engine, pool, "bare");
//   await client.counter.getOrCreate(["a"]).increment(3);
//   const res = await actionFetch(engine, actorId, "increment", { encoding: "cbor", args: [3] });

import { createClient } from "rivetkit/client";
import { decode, encode } from "cbor-x";

import { gatewayFetch } from "./engine.mjs";

/** The encodings of the client protocol. */
export const ENCODINGS = ["json", "cbor", "bare"];

/** CBOR as an actor's output or state (RivetKit's `encodeCborCompat` for plain values). */
export const cborEncode = (value) => Buffer.from(encode(value));
export const cborDecode = (bytes) => decode(bytes);

/** Prefix of a structured error thrown from JS (the napi bridge contract). */
export const BRIDGE_PREFIX = "__RIVET_ERROR_JSON__:";

/** An Error that the addon turns into a structured `{group, code, message}` error. */
export function bridgedError(fields) {
	return new Error(BRIDGE_PREFIX + JSON.stringify(fields));
}

/** The official client of rivetkit (untyped), reaching actors of `pool` on `engine`. */
export function officialClient(engine, pool, encoding) {
	return createClient({
		endpoint: engine.endpoint,
		namespace: engine.namespace,
		token: engine.token,
		poolName: pool,
		encoding,
	});
}

// --- vbare / BARE, just enough for the client protocol's HTTP messages ---

const VERSION = 4;

/** BARE `uint` (LEB128). */
export function bareUint(n) {
	const out = [];
	let v = BigInt(n);
	do {
		let byte = Number(v & 0x7fn);
		v >>= 7n;
		if (v > 0n) byte |= 0x80;
		out.push(byte);
	} while (v > 0n);
	return Buffer.from(out);
}

/** `data` (length-prefixed bytes). */
export function bareData(bytes) {
	return Buffer.concat([bareUint(bytes.length), Buffer.from(bytes)]);
}

/** `str` (length-prefixed UTF-8). */
export const bareStr = (s) => bareData(Buffer.from(s, "utf8"));

/** vbare framing: 2-byte little-endian version, then the BARE body. */
export function vbare(body, version = VERSION) {
	const head = Buffer.alloc(2);
	head.writeUInt16LE(version);
	return Buffer.concat([head, body]);
}

/** `HttpActionRequest{args}` with CBOR args, framed in `version`. */
export function bareActionRequest(args, version = VERSION) {
	return vbare(bareData(cborEncode(args)), version);
}

/** Reads BARE values in order; throws on truncated input. */
export class BareReader {
	constructor(bytes) {
		this.bytes = Buffer.from(bytes);
		this.at = 0;
	}
	byte() {
		if (this.at >= this.bytes.length) throw new Error("truncated");
		return this.bytes[this.at++];
	}
	u16le() {
		const v = this.bytes.readUInt16LE(this.at);
		this.at += 2;
		return v;
	}
	uint() {
		let value = 0n;
		let shift = 0n;
		for (;;) {
			const byte = this.byte();
			value |= BigInt(byte & 0x7f) << shift;
			if ((byte & 0x80) === 0) return value;
			shift += 7n;
		}
	}
	data() {
		const len = Number(this.uint());
		if (this.at + len > this.bytes.length) throw new Error("truncated data");
		const out = this.bytes.subarray(this.at, this.at + len);
		this.at += len;
		return out;
	}
	str() {
		return this.data().toString("utf8");
	}
	/** `optional<T>`: `absent` when not set. */
	optional(read, absent = undefined) {
		const tag = this.byte();
		if (tag === 0) return absent;
		if (tag === 1) return read();
		throw new Error(`bad optional tag ${tag}`);
	}
}

/** `HttpActionResponse` → `{version, output}` with the output CBOR-decoded. */
export function decodeBareActionResponse(bytes) {
	const r = new BareReader(bytes);
	const version = r.u16le();
	return { version, output: cborDecode(r.data()) };
}

/** `HttpResponseError` (v4) → `{version, group, code, message, metadata?, actor?}`. */
export function decodeBareError(bytes) {
	const r = new BareReader(bytes);
	const version = r.u16le();
	const group = r.str();
	const code = r.str();
	const message = r.str();
	const metadata = r.optional(() => cborDecode(r.data()));
	const actor = r.optional(() => ({
		actorId: r.str(),
		generation: Number(r.uint()),
		key: r.optional(() => r.str()),
	}));
	return { version, group, code, message, metadata, actor };
}

/** The action request body for `args` in `encoding`. */
export function actionBody(encoding, args) {
	switch (encoding) {
		case "json":
			return JSON.stringify({ args });
		case "cbor":
			return cborEncode({ args });
		case "bare":
			return bareActionRequest(args);
		default:
			throw new Error(`unknown encoding ${encoding}`);
	}
}

/** Decodes a response body (success or error) in `encoding`. */
export function decodeBody(encoding, bytes) {
	if (encoding === "json") return JSON.parse(Buffer.from(bytes).toString("utf8"));
	if (encoding === "cbor") return cborDecode(bytes);
	return undefined;
}

/**
 * `POST /gateway/{actorId}/action/{name}` by plain fetch. `body` overrides
 * the encoded `{args}`. Resolves to `{status, headers, bytes, body}` where
 * `body` is the decoded JSON/CBOR body, or for BARE the decoded error
 * (status ≥ 400) or `{output}`.
 */
export async function actionFetch(
	engine,
	actorId,
	name,
	{ encoding = "json", args = [], body, method = "POST", headers = {} } = {},
) {
	const init = {
		method,
		headers: { "x-rivet-encoding": encoding, ...headers },
	};
	if (method !== "GET" && method !== "HEAD") init.body = body ?? actionBody(encoding, args);
	const res = await gatewayFetch(engine.endpoint, actorId, `/action/${encodeURIComponent(name)}`, init);
	const bytes = Buffer.from(await res.arrayBuffer());
	let decoded;
	if ((res.headers.get("content-type") ?? "").includes("application/json")) {
		decoded = bytes.length ? JSON.parse(bytes.toString("utf8")) : undefined;
	} else if (encoding === "bare") {
		decoded = res.status >= 400 ? decodeBareError(bytes) : decodeBareActionResponse(bytes);
	} else {
		decoded = decodeBody(encoding, bytes);
	}
	return { status: res.status, headers: res.headers, bytes, body: decoded };
}
