// The inspector end to end: RivetKit apps on this addon on a real engine,
// under both versions (rivetkit 2.3.19 on engine 2.3, rivetkit 3.0.0 on
// engine 3.0), driven by that version's official client. RivetKit serves
// `/inspector/*` inside `onRequest` and asks the addon to check the bearer
// token. On engine 2.3 the token is the actor's own, created on its first
// start and read here the way the dashboard reads it: from the actor-KV key
// `[3]` through the engine's API. Engine 3.0 has no actor-KV read route, so
// the 3.0 apps run with a test token (`_RIVET_TEST_INSPECTOR_TOKEN`,
// docs/inspector.md). Then the inspector WebSocket
// (`/inspector/connect`, BARE frames read and written by hand below): the
// state and an action's effect, the action names, every protocol version
// and the legacy framing (the example's counter); connections, queue,
// schedules, database and workflow history (test/inspector-server.mjs).

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { decode as cborDecode, encode as cborEncode } from "cbor-x";
import WebSocket from "ws";

import { engineArchOf, interrupt, startAppWithClient } from "./helpers/app.mjs";
import { ADMIN_TOKEN, gatewayFetch, NAMESPACE, startEngine, TOKEN_PROTOCOL, waitFor } from "./helpers/engine.mjs";

const POOL = "inspector";
/** The inspector token of every actor of the 3.0 apps. */
const TEST_TOKEN = "inspector-test-token";
/** The environment of an app of `version`: the test token on engine 3.0. */
const tokenEnv = (version) => (version === "3" ? { _RIVET_TEST_INSPECTOR_TOKEN: TEST_TOKEN } : {});

/** The actor's inspector token: the test token on engine 3.0, else its own. */
async function readToken(engine, actorId) {
	if (engine.arch === "v3") return TEST_TOKEN;
	return readKvToken(engine.endpoint, actorId);
}

/** The actor's inspector token, from its KV key `[3]` through the engine 2.3 API. */
async function readKvToken(endpoint, actorId) {
	const key = encodeURIComponent(Buffer.from([3]).toString("base64"));
	const url = new URL(`/actors/${encodeURIComponent(actorId)}/kv/keys/${key}`, endpoint);
	url.searchParams.set("namespace", NAMESPACE);
	const res = await fetch(url, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
	const text = await res.text();
	assert.equal(res.status, 200, `KV read: ${text}`);
	const body = JSON.parse(text);
	return Buffer.from(body.value, "base64").toString("utf8");
}

async function inspect(endpoint, actorId, path, { token, method = "GET", body } = {}) {
	const headers = {};
	if (token !== undefined) headers.authorization = `Bearer ${token}`;
	if (body !== undefined) headers["content-type"] = "application/json";
	const res = await gatewayFetch(endpoint, actorId, path, {
		method,
		headers,
		body: body === undefined ? undefined : JSON.stringify(body),
	});
	const text = await res.text();
	let json;
	try {
		json = JSON.parse(text);
	} catch {
		json = text;
	}
	return { status: res.status, body: json };
}

// --- inspector protocol frames (BARE, read and written by hand) ---

function uint(n) {
	const out = [];
	while (n >= 0x80) {
		out.push((n & 0x7f) | 0x80);
		n = Math.floor(n / 128);
	}
	out.push(n);
	return out;
}
const data = (bytes) => [...uint(bytes.length), ...bytes];
const str = (s) => data(Buffer.from(s));
// Version 6 requests (`ToServerBody`), by union tag.
const patchStateRequest = (state) => Buffer.from([0, ...data(cborEncode(state))]);
const stateRequest = (id) => Buffer.from([1, ...uint(id)]);
const connectionsRequest = (id) => Buffer.from([2, ...uint(id)]);
const actionRequest = (id, name, args) => Buffer.from([3, ...uint(id), ...str(name), ...data(cborEncode(args))]);
const rpcsRequest = (id) => Buffer.from([4, ...uint(id)]);
const queueRequest = (id, limit) => Buffer.from([6, ...uint(id), ...uint(limit)]);
const workflowHistoryRequest = (id) => Buffer.from([7, ...uint(id)]);
const databaseSchemaRequest = (id) => Buffer.from([9, ...uint(id)]);
const tableRowsRequest = (id, table, limit, offset) =>
	Buffer.from([10, ...uint(id), ...str(table), ...uint(limit), ...uint(offset)]);
const schedulesRequest = (id) => Buffer.from([11, ...uint(id)]);
const scheduleHistoryRequest = (id, scheduleId, limit) =>
	Buffer.from([12, ...uint(id), ...str(scheduleId), ...uint(limit)]);
const scheduleDeleteRequest = (id, scheduleId, kind) =>
	Buffer.from([13, ...uint(id), ...str(scheduleId), ...str(kind)]);

function reader(buf) {
	let at = 0;
	const r = {
		uint() {
			let n = 0;
			let shift = 0;
			for (;;) {
				const b = buf[at++];
				n += (b & 0x7f) * 2 ** shift;
				if (!(b & 0x80)) return n;
				shift += 7;
			}
		},
		data() {
			const len = r.uint();
			const out = buf.subarray(at, at + len);
			at += len;
			return out;
		},
		str: () => r.data().toString(),
		bool: () => buf[at++] === 1,
		opt: (read) => (r.bool() ? read() : null),
		optData: () => r.opt(r.data),
		list(read) {
			const out = [];
			for (let n = r.uint(); n > 0; n--) out.push(read());
			return out;
		},
		rest: () => buf.subarray(at),
	};
	return r;
}

const connection = (r) => ({ id: r.str(), details: cborDecode(r.data()) });
const schedule = (r) => ({
	id: r.str(),
	name: r.opt(r.str),
	kind: r.str(),
	action: r.str(),
	args: cborDecode(r.data()),
	nextRunAt: r.uint(),
	lastRunAt: r.opt(r.uint),
	expression: r.opt(r.str),
	timezone: r.opt(r.str),
	intervalMs: r.opt(r.uint),
	maxHistory: r.opt(r.uint),
});

/** Decodes a version 6 message (`ToClientBody`). */
function decodeMessage(buf) {
	const r = reader(buf);
	const tag = r.uint();
	switch (tag) {
		case 0: {
			const rid = r.uint();
			const state = r.optData();
			return { tag: "StateResponse", rid, state: state && cborDecode(state), isStateEnabled: r.bool() };
		}
		case 1:
			return { tag: "ConnectionsResponse", rid: r.uint(), connections: r.list(() => connection(r)) };
		case 2:
			return { tag: "ActionResponse", rid: r.uint(), output: cborDecode(r.data()) };
		case 3:
			return { tag: "ConnectionsUpdated", connections: r.list(() => connection(r)) };
		case 4:
			return { tag: "QueueUpdated", queueSize: r.uint() };
		case 5:
			return { tag: "StateUpdated", state: cborDecode(r.data()) };
		case 7:
			return { tag: "SchedulesUpdated", schedules: r.list(() => schedule(r)) };
		case 8:
			return { tag: "RpcsListResponse", rid: r.uint(), rpcs: r.list(r.str) };
		case 10:
			return {
				tag: "QueueResponse",
				rid: r.uint(),
				size: r.uint(),
				maxSize: r.uint(),
				messages: r.list(() => ({ id: r.uint(), name: r.str(), createdAtMs: r.uint() })),
				truncated: r.bool(),
			};
		case 11:
			return { tag: "WorkflowHistoryResponse", rid: r.uint(), history: r.optData(), isWorkflowEnabled: r.bool() };
		case 13:
			return { tag: "SchedulesResponse", rid: r.uint(), schedules: r.list(() => schedule(r)) };
		case 14:
			return { tag: "ScheduleHistoryResponse", rid: r.uint(), scheduleId: r.str(), history: r.list(() => r.rest()) };
		case 15:
			return { tag: "ScheduleDeleteResponse", rid: r.uint(), scheduleId: r.str(), deleted: r.bool() };
		case 16:
			return { tag: "Error", message: r.str() };
		case 17: {
			const connections = r.list(() => connection(r));
			const state = r.optData();
			return {
				tag: "Init",
				connections,
				state: state && cborDecode(state),
				isStateEnabled: r.bool(),
				rpcs: r.list(r.str),
				isDatabaseEnabled: r.bool(),
				queueSize: r.uint(),
				workflowHistory: r.optData(),
				isWorkflowEnabled: r.bool(),
				tabConfig: r.list(() => ({ id: r.str(), label: r.opt(r.str), icon: r.opt(r.str), hidden: r.bool() })),
				schedules: r.list(() => schedule(r)),
			};
		}
		case 18:
			return { tag: "DatabaseSchemaResponse", rid: r.uint(), schema: cborDecode(r.data()) };
		case 19:
			return { tag: "DatabaseTableRowsResponse", rid: r.uint(), result: cborDecode(r.data()) };
		default:
			return { tag };
	}
}

/**
 * An inspector socket. `version` goes in the query (`null`: none, the
 * legacy framing); messages of version 6 are decoded, others are kept as
 * `{tag, raw}` with their union tag (after the two-byte version prefix of
 * the legacy framing).
 */
function openInspector(engine, actorId, token, { version = 6 } = {}) {
	const query = version === null ? "" : `?protocol_version=${version}`;
	const url = `ws://127.0.0.1:${engine.guardPort}/gateway/${encodeURIComponent(actorId)}/inspector/connect${query}`;
	const ws = new WebSocket(url, ["rivet", TOKEN_PROTOCOL, `rivet_inspector_token.${token}`]);
	const messages = [];
	let wake = () => {};
	ws.on("message", (buf) => {
		const bytes = Buffer.from(buf);
		if (version === 6) messages.push(decodeMessage(bytes));
		else {
			const body = version === null ? bytes.subarray(2) : bytes;
			messages.push({ tag: body[0], raw: body, prefix: version === null ? bytes.readUInt16LE(0) : undefined });
		}
		wake();
	});
	const closed = new Promise((resolve) =>
		ws.on("close", (code, reason) => resolve({ code, reason: reason.toString() })),
	);
	ws.on("error", () => {});
	const inspector = {
		ws,
		closed,
		/** The first message not yet taken that `pick` accepts. */
		async take(pick, what) {
			const deadline = Date.now() + 20_000;
			for (;;) {
				const i = messages.findIndex(pick);
				if (i >= 0) return messages.splice(i, 1)[0];
				if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}; got ${JSON.stringify(messages)}`);
				await new Promise((resolve) => {
					const timer = setTimeout(resolve, 200);
					wake = () => {
						clearTimeout(timer);
						resolve();
					};
				});
			}
		},
		/** Sends `frame` and takes the answer tagged `tag` with `rid`. */
		async ask(frame, tag, rid) {
			ws.send(frame);
			return inspector.take((m) => m.tag === tag && m.rid === rid, `${tag} ${rid}`);
		},
		async close() {
			ws.close();
			await closed;
		},
	};
	return inspector;
}

for (const version of ["2", "3"])
	describe(`the inspector's HTTP routes (RivetKit ${version === "3" ? "3.0.0" : "2.3.19"})`, () => {
		let engine;
		let app;
		let client;

		before(async () => {
			engine = await startEngine({ arch: engineArchOf(version) });
			({ app, client } = await startAppWithClient("src/server.mjs", {
				rivetkit: version,
				engine,
				pool: POOL,
				env: tokenEnv(version),
			}));
		});

		after(async () => {
			if (app && !app.exited) await interrupt(app);
			await engine?.stop();
		});

		test("refused without a valid token, served with the actor's token", async () => {
			const counter = client.counter.getOrCreate(["inspected"]);
			assert.equal(await counter.increment(5), 5);
			const actorId = await counter.resolve();
			const token = await readToken(engine, actorId);
			// The actor's own token (engine 2.3; the 3.0 apps run with a test token).
			if (version === "2") assert.match(token, /^[A-Za-z0-9_-]{43}$/, "32 random bytes, base64url");

			for (const bad of [undefined, "", "not-the-token"]) {
				const res = await inspect(engine.endpoint, actorId, "/inspector/state", { token: bad });
				assert.equal(res.status, 401, JSON.stringify(res.body));
				assert.equal(`${res.body.group}.${res.body.code}`, "inspector.unauthorized");
			}

			const state = await inspect(engine.endpoint, actorId, "/inspector/state", { token });
			assert.equal(state.status, 200, JSON.stringify(state.body));
			assert.deepEqual(state.body, { state: { count: 5 }, isStateEnabled: true });

			const summary = await inspect(engine.endpoint, actorId, "/inspector/summary", { token });
			assert.equal(summary.status, 200, JSON.stringify(summary.body));
			assert.equal(summary.body.queueSize, 0);
			assert.deepEqual(summary.body.rpcs, ["getCount", "goToSleep", "increment"]);

			const action = await inspect(engine.endpoint, actorId, "/inspector/action/increment", {
				token,
				method: "POST",
				body: { args: [2] },
			});
			assert.equal(action.status, 200, JSON.stringify(action.body));
			assert.deepEqual(action.body, { output: 7 });
			assert.equal(await counter.getCount(), 7);
		});

		test("the token survives sleep and is kept by the next generation", async () => {
			const counter = client.counter.getOrCreate(["sleepy"]);
			await counter.increment(1);
			const actorId = await counter.resolve();
			const token = await readToken(engine, actorId);
			await counter.goToSleep();
			await waitFor(async () => (await counter.getCount()) === 1, { what: "the counter awake again" });
			assert.equal(await readToken(engine, actorId), token);
			const state = await inspect(engine.endpoint, actorId, "/inspector/state", { token });
			assert.equal(state.status, 200, JSON.stringify(state.body));
			assert.deepEqual(state.body.state, { count: 1 });
		});

		test("the inspector WebSocket reads the state and sees an action's effect", async () => {
			const counter = client.counter.getOrCreate(["live"]);
			assert.equal(await counter.increment(10), 10);
			const actorId = await counter.resolve();
			const token = await readToken(engine, actorId);

			const refused = openInspector(engine, actorId, "not-the-token");
			const refusal = await refused.closed;
			assert.notEqual(refusal.code, 1000, JSON.stringify(refusal));

			const inspector = openInspector(engine, actorId, token);
			try {
				const init = await inspector.take((m) => m.tag === "Init", "Init");
				// The state as last saved: RivetKit saves on its own schedule, so
				// the first increment may not be saved yet.
				assert.deepEqual(init.connections, []);
				assert.equal(init.isStateEnabled, true);
				// The actions RivetKit configured, in its (sorted) order.
				assert.deepEqual(init.rpcs, ["getCount", "goToSleep", "increment"]);
				assert.equal(init.isDatabaseEnabled, true, "RivetKit always sets hasDatabase");
				assert.equal(init.isWorkflowEnabled, false);
				assert.deepEqual(init.schedules, []);
				const rpcs = await inspector.ask(rpcsRequest(7), "RpcsListResponse", 7);
				assert.deepEqual(rpcs.rpcs, ["getCount", "goToSleep", "increment"]);
				assert.ok([0, 10].includes(init.state.count), JSON.stringify(init.state));

				await counter.increment(5);
				const updated = await inspector.take(
					(m) => m.tag === "StateUpdated" && m.state.count === 15,
					"StateUpdated to 15",
				);
				assert.deepEqual(updated.state, { count: 15 });

				inspector.ws.send(stateRequest(1));
				const state = await inspector.take((m) => m.tag === "StateResponse", "StateResponse");
				assert.deepEqual(state, { tag: "StateResponse", rid: 1, state: { count: 15 }, isStateEnabled: true });

				inspector.ws.send(actionRequest(2, "increment", [1]));
				const action = await inspector.take((m) => m.tag === "ActionResponse", "ActionResponse");
				assert.deepEqual(action, { tag: "ActionResponse", rid: 2, output: 16 });
				await inspector.take((m) => m.tag === "StateUpdated" && m.state.count === 16, "StateUpdated to 16");
				assert.equal(await counter.getCount(), 16);
			} finally {
				inspector.ws.close();
				await inspector.closed;
			}

			// Older versions: the same requests, union tags of their version.
			const rpcsTag = { 1: 4, 2: 7, 3: 7, 4: 7, 5: 7 };
			const errorTag = { 1: 8, 2: 11, 3: 11, 4: 12, 5: 12 };
			const initTag = { 1: 9, 2: 12, 3: 12, 4: 13, 5: 13 };
			for (const version of [1, 2, 3, 4, 5]) {
				const old = openInspector(engine, actorId, token, { version });
				try {
					const init = await old.take((m) => m.tag === initTag[version], `a version ${version} Init`);
					const r = reader(init.raw.subarray(1));
					assert.deepEqual(r.list(r.str), [], "no connections");
					if (version === 1) assert.deepEqual(r.list(r.str), [], "no events");
					const state = r.optData();
					assert.equal(cborDecode(state).count, 16, `v${version} Init state`);
					assert.equal(r.bool(), true);
					assert.deepEqual(r.list(r.str), ["getCount", "goToSleep", "increment"], `v${version} Init rpcs`);

					old.ws.send(Buffer.from(version === 1 ? [6, 3] : [4, 3]));
					const rpcs = await old.take((m) => m.tag === rpcsTag[version], `a version ${version} RpcsListResponse`);
					const rr = reader(rpcs.raw.subarray(1));
					assert.equal(rr.uint(), 3);
					assert.deepEqual(rr.list(rr.str), ["getCount", "goToSleep", "increment"]);

					// Version 1's event requests, and kinds a version lacks: an Error, and the socket stays.
					old.ws.send(Buffer.from(version === 1 ? [4, 4] : [version === 2 ? 8 : 11, 4]));
					const error = await old.take((m) => m.tag === errorTag[version], `a version ${version} Error`);
					assert.match(reader(error.raw.subarray(1)).str(), /inspector\.invalid_message/);
					old.ws.send(stateRequest(5));
					const again = await old.take((m) => m.tag === 0, `a version ${version} StateResponse`);
					assert.equal(again.raw[1], 5);
				} finally {
					await old.close();
				}
			}
			// No version named: every frame carries its version; answers are version 5.
			const legacy = openInspector(engine, actorId, token, { version: null });
			try {
				const init = await legacy.take((m) => m.tag === 13, "a legacy Init");
				assert.equal(init.prefix, 5);
				legacy.ws.send(Buffer.from([6, 0, 1, 8]));
				const state = await legacy.take((m) => m.tag === 0, "a legacy StateResponse");
				assert.deepEqual([state.prefix, state.raw[1]], [5, 8]);
			} finally {
				await legacy.close();
			}
			const v7 = openInspector(engine, actorId, token, { version: 7 });
			assert.deepEqual(await v7.closed, { code: 1002, reason: "inspector.invalid_protocol_version" });
		});
	});

for (const version of ["2", "3"])
	describe(`the inspector WebSocket's views of an actor (RivetKit ${version === "3" ? "3.0.0" : "2.3.19"})`, () => {
		const pool = "inspector-views";
		let engine;
		let app;
		let client;

		before(async () => {
			engine = await startEngine({ arch: engineArchOf(version) });
			({ app, client } = await startAppWithClient("test/inspector-server.mjs", {
				rivetkit: version,
				engine,
				pool,
				env: tokenEnv(version),
			}));
		});

		after(async () => {
			if (app && !app.exited) await interrupt(app);
			await engine?.stop();
		});

		test("connections, queue and schedules, read-only but for deletes; bad requests get errors", async () => {
			const desk = client.desk.getOrCreate(["one"], { params: { name: "ada" } });
			await desk.increment(1);
			const conn = desk.connect();
			assert.equal(await conn.increment(1), 2);
			for (const n of [1, 2, 3]) await desk.enqueue("jobs", { n });
			await desk.enqueue("mail", { to: "bob" });
			const eventId = await desk.remindLater();
			await desk.tickEveryMinute();
			const actorId = await desk.resolve();
			const token = await readToken(engine, actorId);

			const inspector = openInspector(engine, actorId, token);
			try {
				const init = await inspector.take((m) => m.tag === "Init", "Init");
				assert.deepEqual(init.rpcs, ["enqueue", "increment", "remindLater", "tickEveryMinute"]);
				assert.equal(init.queueSize, 4);
				assert.equal(init.isDatabaseEnabled, true);
				assert.deepEqual(init.schedules.map((s) => s.kind).sort(), ["at", "every"]);
				const ada = init.connections.find((c) => c.details.params?.name === "ada");
				assert.ok(ada, JSON.stringify(init.connections));

				const { connections } = await inspector.ask(connectionsRequest(1), "ConnectionsResponse", 1);
				const details = connections.find((c) => c.id === ada.id)?.details;
				assert.equal(details?.stateEnabled, true, JSON.stringify(connections));
				assert.deepEqual(details.params, { name: "ada" });
				assert.deepEqual(details.state, { joined: "ada" }, "createConnState's state");
				assert.equal(typeof details.subscriptions, "number");
				assert.equal(typeof details.isHibernatable, "boolean");
				assert.equal(details.type, null);

				const queue = await inspector.ask(queueRequest(2, 2), "QueueResponse", 2);
				assert.equal(queue.size, 4);
				assert.equal(queue.truncated, true);
				assert.deepEqual(
					queue.messages.map((m) => m.name),
					["jobs", "jobs"],
				);
				assert.ok(queue.messages[0].id < queue.messages[1].id && queue.messages[0].createdAtMs > 0);
				assert.equal((await inspector.ask(queueRequest(3, 10), "QueueResponse", 3)).truncated, false);
				await desk.enqueue("mail", { to: "cy" });
				await inspector.take((m) => m.tag === "QueueUpdated" && m.queueSize === 5, "QueueUpdated to 5");

				const { schedules } = await inspector.ask(schedulesRequest(7), "SchedulesResponse", 7);
				const tick = schedules.find((s) => s.kind === "every");
				assert.deepEqual(
					{ id: tick.id, name: tick.name, action: tick.action, args: tick.args, intervalMs: tick.intervalMs },
					{ id: "tick", name: "tick", action: "increment", args: [1], intervalMs: 60_000 },
				);
				const at = schedules.find((s) => s.kind === "at");
				assert.deepEqual(
					{ id: at.id, action: at.action, args: at.args },
					{ id: eventId, action: "increment", args: [1] },
				);
				assert.ok(tick.nextRunAt <= at.nextRunAt, "soonest first");
				const history = await inspector.ask(scheduleHistoryRequest(8, "tick", 10), "ScheduleHistoryResponse", 8);
				assert.deepEqual(history.history, []);

				const deleted = await inspector.ask(scheduleDeleteRequest(9, eventId, "at"), "ScheduleDeleteResponse", 9);
				assert.deepEqual(deleted, { tag: "ScheduleDeleteResponse", rid: 9, scheduleId: eventId, deleted: true });
				await inspector.take((m) => m.tag === "SchedulesUpdated" && m.schedules.length === 1, "SchedulesUpdated");
				const left = await inspector.ask(schedulesRequest(10), "SchedulesResponse", 10);
				assert.deepEqual(
					left.schedules.map((s) => s.id),
					["tick"],
				);
				inspector.ws.send(scheduleDeleteRequest(11, "tick", "weekly"));
				await inspector.take(
					(m) => m.tag === "Error" && /inspector\.invalid_request/.test(m.message),
					"a bad kind's Error",
				);

				// An undecodable frame gets an Error; the socket and the actor go on.
				inspector.ws.send(Buffer.from([0xff, 0xff]));
				await inspector.take(
					(m) => m.tag === "Error" && /inspector\.invalid_message/.test(m.message),
					"a frame's Error",
				);
				const action = await inspector.ask(actionRequest(12, "increment", [5]), "ActionResponse", 12);
				assert.equal(action.output, 7);

				// A new state goes through RivetKit's runtime, which holds it.
				inspector.ws.send(patchStateRequest({ count: 100 }));
				await inspector.take((m) => m.tag === "StateUpdated" && m.state.count === 100, "StateUpdated to 100");
				assert.equal(await desk.increment(0), 100);
				inspector.ws.send(Buffer.from([0, 1, 0xff]));
				await inspector.take(
					(m) => m.tag === "Error" && /inspector\.invalid_request/.test(m.message),
					"a bad state's Error",
				);

				await conn.dispose();
				await inspector.take(
					(m) => m.tag === "ConnectionsUpdated" && !m.connections.some((c) => c.id === ada.id),
					"ConnectionsUpdated without ada",
				);
			} finally {
				await inspector.close();
			}
			assert.equal(await desk.increment(0), 100);
		});

		test("the database's tables and rows; an unknown table is an Error", async () => {
			const notebook = client.notebook.getOrCreate(["one"]);
			await notebook.addNote("hello");
			await notebook.addNote("world");
			const actorId = await notebook.resolve();
			const inspector = openInspector(engine, actorId, await readToken(engine, actorId));
			try {
				const init = await inspector.take((m) => m.tag === "Init", "Init");
				assert.equal(init.isDatabaseEnabled, true);
				const { schema } = await inspector.ask(databaseSchemaRequest(4), "DatabaseSchemaResponse", 4);
				const notes = schema.tables.find((table) => table.table.name === "notes");
				assert.ok(notes, JSON.stringify(schema));
				assert.deepEqual(notes.table, { schema: "main", name: "notes", type: "table" });
				assert.equal(notes.records, 2);
				assert.deepEqual(
					notes.columns.map((c) => c.name),
					["id", "body"],
				);
				const rows = await inspector.ask(tableRowsRequest(5, "notes", 1, 1), "DatabaseTableRowsResponse", 5);
				assert.deepEqual(rows.result, [{ id: 2, body: "world" }]);
				inspector.ws.send(tableRowsRequest(6, "no_such_table", 10, 0));
				const missing = await inspector.take((m) => m.tag === "Error" && /no such table/.test(m.message), "an Error");
				assert.ok(missing.message.length > 0);
			} finally {
				await inspector.close();
			}
		});

		test("a workflow's history comes from the workflow", async () => {
			const flow = client.flow.getOrCreate(["w"]);
			await flow.steps();
			await waitFor(async () => (await flow.steps()) === 1, { what: "the workflow's first step" });
			const actorId = await flow.resolve();
			const token = await readToken(engine, actorId);
			const inspector = openInspector(engine, actorId, token);
			try {
				const init = await inspector.take((m) => m.tag === "Init", "Init");
				assert.equal(init.isWorkflowEnabled, true);
				assert.ok(init.workflowHistory?.includes("first"), "the history names the step");
				const reply = await inspector.ask(workflowHistoryRequest(1), "WorkflowHistoryResponse", 1);
				assert.equal(reply.isWorkflowEnabled, true);
				assert.ok(reply.history?.includes("first"), "the same history on request");
			} finally {
				await inspector.close();
			}
		});

		test("an actor without a workflow has no history", async () => {
			const desk = client.desk.getOrCreate(["two"]);
			await desk.increment(1);
			const deskId = await desk.resolve();
			const plain = openInspector(engine, deskId, await readToken(engine, deskId));
			try {
				const init = await plain.take((m) => m.tag === "Init", "Init");
				assert.deepEqual([init.isWorkflowEnabled, init.workflowHistory], [false, null]);
				const reply = await plain.ask(workflowHistoryRequest(2), "WorkflowHistoryResponse", 2);
				assert.deepEqual([reply.isWorkflowEnabled, reply.history], [false, null]);
			} finally {
				await plain.close();
			}
		});
	});
