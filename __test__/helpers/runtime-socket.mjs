// A small client of the actor runtime socket (docs/runtime-socket.md), the
// role of "another process" in __test__/runtime-socket.test.mjs: frames
// (a big-endian u32 length, then the payload), the version prefix (u16 LE)
// and the BARE encoding of the version 1 messages, written from the doc.
//
//   const client = await connectRuntimeSocket(path);
//   await client.hello();                      // {ok: true, maxFrameBytes}
//   await client.call({ kind: "query", sql: "SELECT ?", params: [1] });
//   await client.next();                       // the next frame, or null once closed

import { connect } from "node:net";
import { inspect } from "node:util";

const VERSION = 1;

const RESPONSES = [
	"ExecOk",
	"QueryOk",
	"BeginOk",
	"CommitOk",
	"RollbackOk",
	"SqlError",
	"EndpointClosed",
	"QueueFull",
	"InvalidLeaseKey",
	"LeaseExpired",
	"ResponseTooLarge",
];

class Writer {
	parts = [];
	bytes(b) {
		this.parts.push(Buffer.from(b));
	}
	uint(n) {
		const out = [];
		let v = BigInt(n);
		while (v >= 0x80n) {
			out.push(Number(v & 0x7fn) | 0x80);
			v >>= 7n;
		}
		out.push(Number(v));
		this.bytes(out);
	}
	u32(n) {
		const b = Buffer.alloc(4);
		b.writeUInt32LE(n);
		this.bytes(b);
	}
	u64(n) {
		const b = Buffer.alloc(8);
		b.writeBigUInt64LE(BigInt(n));
		this.bytes(b);
	}
	i64(n) {
		const b = Buffer.alloc(8);
		b.writeBigInt64LE(BigInt(n));
		this.bytes(b);
	}
	f64(n) {
		const b = Buffer.alloc(8);
		b.writeDoubleLE(n);
		this.bytes(b);
	}
	data(b) {
		this.uint(b.length);
		this.bytes(b);
	}
	str(s) {
		this.data(Buffer.from(s, "utf8"));
	}
	optional(v, f) {
		if (v === undefined || v === null) return this.bytes([0]);
		this.bytes([1]);
		f(v);
	}
	value(v) {
		if (v === null) return this.uint(0);
		if (typeof v === "bigint" || Number.isInteger(v)) {
			this.uint(1);
			return this.i64(v);
		}
		if (typeof v === "number") {
			this.uint(2);
			return this.f64(v);
		}
		if (typeof v === "string") {
			this.uint(3);
			return this.str(v);
		}
		this.uint(4);
		this.data(v);
	}
	done() {
		return Buffer.concat(this.parts);
	}
}

class Reader {
	constructor(buf) {
		this.b = buf;
		this.o = 0;
	}
	byte() {
		if (this.o >= this.b.length) throw new Error("truncated");
		return this.b[this.o++];
	}
	uint() {
		let v = 0n;
		let shift = 0n;
		for (;;) {
			const x = this.byte();
			v |= BigInt(x & 0x7f) << shift;
			if (!(x & 0x80)) return Number(v);
			shift += 7n;
		}
	}
	take(n) {
		if (this.o + n > this.b.length) throw new Error("truncated");
		const out = this.b.subarray(this.o, this.o + n);
		this.o += n;
		return out;
	}
	u32() {
		return this.take(4).readUInt32LE();
	}
	i32() {
		return this.take(4).readInt32LE();
	}
	u64() {
		return Number(this.take(8).readBigUInt64LE());
	}
	i64() {
		const v = this.take(8).readBigInt64LE();
		return v >= BigInt(Number.MIN_SAFE_INTEGER) && v <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(v) : v;
	}
	f64() {
		return this.take(8).readDoubleLE();
	}
	data() {
		return Buffer.from(this.take(this.uint()));
	}
	str() {
		return this.data().toString("utf8");
	}
	optional(f) {
		return this.byte() === 1 ? f() : null;
	}
	list(f) {
		const n = this.uint();
		return Array.from({ length: n }, () => f());
	}
	value() {
		switch (this.uint()) {
			case 0:
				return null;
			case 1:
				return this.i64();
			case 2:
				return this.f64();
			case 3:
				return this.str();
			case 4:
				return this.data();
			default:
				throw new Error("unknown SQL value");
		}
	}
	versioned() {
		const version = this.take(2).readUInt16LE();
		if (version !== VERSION) throw new Error(`version ${version}`);
		return this;
	}
	end() {
		if (this.o !== this.b.length) throw new Error("trailing bytes");
	}
}

function versioned() {
	const w = new Writer();
	const v = Buffer.alloc(2);
	v.writeUInt16LE(VERSION);
	w.bytes(v);
	return w;
}

/**
 * Encodes a request: `{id, lease?, kind, ...}` with kind `exec` (script),
 * `query` (sql, params), `begin` (key, timeoutMs?), `commit` (key),
 * `rollback` (key).
 */
export function encodeRequest(req) {
	const w = versioned();
	w.uint(0);
	w.u32(req.id);
	w.optional(req.lease, (k) => w.str(k));
	switch (req.kind) {
		case "exec":
			w.uint(0);
			w.str(req.script);
			break;
		case "query":
			w.uint(1);
			w.str(req.sql);
			w.uint((req.params ?? []).length);
			for (const p of req.params ?? []) w.value(p);
			break;
		case "begin":
			w.uint(2);
			w.str(req.key);
			w.optional(req.timeoutMs, (ms) => w.u64(ms));
			break;
		case "commit":
		case "rollback":
			w.uint(req.kind === "commit" ? 3 : 4);
			w.str(req.key);
			break;
		default:
			throw new Error(`unknown kind ${req.kind}`);
	}
	return w.done();
}

/** Decodes a server frame: `{id, type, ...fields}` or `{goAway: reason}`. */
export function decodeServerFrame(payload) {
	const r = new Reader(payload).versioned();
	let frame;
	if (r.uint() === 1) {
		frame = { goAway: ["FrameTooLarge", "MalformedFrame"][r.uint()] };
	} else {
		const id = r.u32();
		const type = RESPONSES[r.uint()];
		frame = { id, type };
		if (type === "QueryOk") {
			frame.columns = r.list(() => r.str());
			frame.rows = r.list(() => r.list(() => r.value()));
			frame.changes = r.i64();
			frame.lastInsertRowId = r.optional(() => r.i64());
		} else if (type === "SqlError") {
			Object.assign(frame, { code: r.i32(), statementIndex: r.u32(), message: r.str() });
		} else if (type === "QueueFull") {
			Object.assign(frame, { limit: r.str(), capacity: r.u32() });
		} else if (type === "InvalidLeaseKey") {
			frame.message = r.str();
		} else if (type === "LeaseExpired") {
			Object.assign(frame, { timeoutMs: r.u64(), message: r.str() });
		}
	}
	r.end();
	return frame;
}

/** Frames `payload`: its length as a big-endian u32, then the bytes. */
export function frame(payload) {
	const head = Buffer.alloc(4);
	head.writeUInt32BE(payload.length);
	return Buffer.concat([head, payload]);
}

/** Connects to the socket at `path`; see the module comment. */
export async function connectRuntimeSocket(path) {
	const socket = connect(path);
	await new Promise((resolve, reject) => {
		socket.once("connect", resolve);
		socket.once("error", reject);
	});
	let buffered = Buffer.alloc(0);
	let closed = false;
	const frames = [];
	const waiters = [];
	const flush = () => {
		while (waiters.length && (frames.length || closed)) waiters.shift()(frames.length ? frames.shift() : null);
	};
	socket.on("data", (chunk) => {
		buffered = Buffer.concat([buffered, chunk]);
		while (buffered.length >= 4 && buffered.length >= 4 + buffered.readUInt32BE(0)) {
			const n = buffered.readUInt32BE(0);
			frames.push(buffered.subarray(4, 4 + n));
			buffered = buffered.subarray(4 + n);
		}
		flush();
	});
	socket.on("close", () => {
		closed = true;
		flush();
	});
	socket.on("error", () => {});
	const nextPayload = () =>
		new Promise((resolve) => {
			waiters.push(resolve);
			flush();
		});
	let nextId = 1;
	return {
		socket,
		/** Sends raw bytes (already framed or not). */
		write: (bytes) => socket.write(bytes),
		/** The next server frame, decoded; `null` once the server closed. */
		next: async () => {
			const payload = await nextPayload();
			return payload === null ? null : decodeServerFrame(payload);
		},
		async hello() {
			socket.write(frame(versioned().done()));
			const payload = await nextPayload();
			if (payload === null) return null;
			const r = new Reader(payload).versioned();
			const hello = r.uint() === 0 ? { ok: true, maxFrameBytes: r.u32() } : { ok: false };
			r.end();
			return hello;
		},
		/** Sends a request (an id is given when missing) and waits for its answer. */
		async call(req) {
			const id = req.id ?? nextId++;
			socket.write(frame(encodeRequest({ ...req, id })));
			const answer = await this.next();
			if (answer?.id !== id) throw new Error(`expected the answer to ${id}, got ${inspect(answer)}`);
			return answer;
		},
		close: () => socket.destroy(),
	};
}
