// Drop-in compatibility with `@rivetkit/rivetkit-napi`, 2.3.19 and 3.0.0:
// every class, method and exported function of its index.d.ts is declared
// in ours and exported at runtime, and every field of its interfaces is
// declared with a type that admits the reference's; and none is a stub: a
// probe calls every method an action can reach and fails on any
// `rivetkit-native.unsupported` (the error stubs gave before everything was
// built).
//
// The references are the root's devDependencies: `@rivetkit/rivetkit-napi`
// (pinned to 2.3.19) and `rivetkit-napi-3` (an npm alias of
// `@rivetkit/rivetkit-napi@3.0.0`). The tests named "3.0 contract" check
// what 3.0.0 added (`CancellationListener`, `engineSpawn?: boolean`,
// `sqliteProfiling.queries`/`fingerprints`); they fail until the addon's
// 3.0 work lands (docs/versions.md).

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { after, before, describe, test } from "node:test";

import { native, serveActors } from "./helpers/actors.mjs";
import { actionFetch, cborEncode } from "./helpers/client.mjs";
import { getOrCreateActor, startEngine } from "./helpers/engine.mjs";

const require = createRequire(import.meta.url);

/** The reference package of each contract version (root devDependencies). */
const REFERENCES = { "2.3.19": "@rivetkit/rivetkit-napi", "3.0.0": "rivetkit-napi-3" };

function referenceDts(version = "2.3.19") {
	// The package's `exports` only exposes ".", so resolve its entry point
	// (resolution does not load it) and read the files next to it.
	const dir = dirname(require.resolve(REFERENCES[version]));
	const pinned = JSON.parse(readFileSync(join(dir, "package.json"), "utf8")).version;
	assert.equal(pinned, version, `the reference package ${REFERENCES[version]} must be pinned to ${version}`);
	return readFileSync(join(dir, "index.d.ts"), "utf8");
}

const ours = readFileSync(new URL("../index.d.ts", import.meta.url), "utf8");

/**
 * `{classes: Map<name, Set<method>>, functions: Set<name>, interfaces:
 * Map<name, Map<field, type>>}` of a d.ts.
 */
function surface(dts) {
	const classes = new Map();
	const functions = new Set();
	const interfaces = new Map();
	let current = null;
	let fields = null;
	for (const raw of dts.split("\n")) {
		const line = raw.trim();
		if (line.startsWith("*") || line.startsWith("/")) continue;
		const cls = /^export declare class (\w+)/.exec(line);
		const fn = /^export declare function (\w+)/.exec(line);
		const iface = /^export interface (\w+)/.exec(line);
		const method = /^(?:static\s+)?(\w+)\s*\(/.exec(line);
		const field = /^(\w+)\??:\s*(.*)$/.exec(line);
		if (cls) {
			current = new Set();
			classes.set(cls[1], current);
		} else if (fn) {
			functions.add(fn[1]);
		} else if (iface) {
			fields = new Map();
			interfaces.set(iface[1], fields);
		} else if ((current || fields) && line === "}") {
			current = null;
			fields = null;
		} else if (current && method) {
			current.add(method[1]);
		} else if (fields && field) {
			fields.set(field[1], field[2]);
		}
	}
	return { classes, functions, interfaces };
}

/** What `reference` declares that `mine` does not: classes, methods, functions. */
function missingDeclarations(reference, mine) {
	const missing = [];
	for (const [name, methods] of reference.classes) {
		const have = mine.classes.get(name);
		if (!have) {
			missing.push(`class ${name}`);
			continue;
		}
		for (const method of methods) if (!have.has(method)) missing.push(`${name}.${method}`);
	}
	for (const fn of reference.functions) if (!mine.functions.has(fn)) missing.push(`function ${fn}`);
	return missing;
}

/** What `reference` declares that the loaded addon does not export at runtime. */
function missingExports(reference) {
	const missing = [];
	for (const name of reference.classes.keys()) if (typeof native[name] !== "function") missing.push(name);
	for (const name of reference.functions) if (typeof native[name] !== "function") missing.push(name);
	for (const [name, methods] of reference.classes) {
		const proto = native[name]?.prototype;
		if (!proto) continue;
		for (const method of methods) {
			if (method === "constructor") continue;
			if (typeof proto[method] !== "function") missing.push(`${name}.prototype.${method}`);
		}
	}
	return missing;
}

const PRIMITIVES = ["boolean", "number", "string", "bigint", "Buffer"];

/**
 * Interface fields of `reference` that `mine` lacks, or whose type does not
 * admit the reference's: each primitive the reference's type names must be
 * in ours (ours may be narrower elsewhere: string unions, precise objects).
 */
function missingFields(reference, mine) {
	const missing = [];
	for (const [name, fields] of reference.interfaces) {
		const have = mine.interfaces.get(name);
		if (!have) {
			missing.push(`interface ${name}`);
			continue;
		}
		for (const [field, type] of fields) {
			if (!have.has(field)) {
				missing.push(`${name}.${field}`);
				continue;
			}
			const named = (t, p) => new RegExp(`\\b${p}\\b`).test(t);
			const lacking = PRIMITIVES.filter((p) => named(type, p) && !named(have.get(field), p));
			if (lacking.length) missing.push(`${name}.${field}: ${type} (ours: ${have.get(field)})`);
		}
	}
	return missing;
}

describe("surface of @rivetkit/rivetkit-napi@2.3.19", () => {
	const reference = surface(referenceDts("2.3.19"));
	const mine = surface(ours);

	test("the reference surface was parsed", () => {
		assert.ok(reference.classes.size >= 15, `only ${reference.classes.size} classes parsed`);
		assert.ok(reference.classes.get("ActorContext").size >= 50);
		assert.ok(reference.functions.has("setTelemetryLogSink"));
		assert.ok(reference.interfaces.size >= 40, `only ${reference.interfaces.size} interfaces parsed`);
		assert.ok(reference.interfaces.get("JsServeConfig").has("poolName"));
	});

	test("index.d.ts declares every class, method and function", () => {
		const missing = missingDeclarations(reference, mine);
		assert.deepEqual(missing, [], `missing from index.d.ts:\n${missing.join("\n")}`);
	});

	test("index.d.ts declares every interface field, with a type that admits the reference's", () => {
		const missing = missingFields(reference, mine);
		assert.deepEqual(missing, [], `missing from index.d.ts:\n${missing.join("\n")}`);
	});

	test("index.js exports every class and function at runtime", () => {
		const missing = missingExports(reference);
		assert.deepEqual(missing, [], `missing from index.js:\n${missing.join("\n")}`);
	});
	test("harmless telemetry functions work", async () => {
		assert.equal(
			native.setTelemetryLogSink(() => {}),
			undefined,
		);
		await native.shutdownTelemetry();
	});

	test("no free function throws rivetkit-native.unsupported; the inspector conversions work", () => {
		// StateRequest {id: 5} is the same frame in versions 5 and 6.
		assert.deepEqual([...native.decodeInspectorRequest(Buffer.from([1, 5]), 5)], [1, 5]);
		// Error {message: "x"}: union tag 16 in version 6, 12 in version 5.
		assert.deepEqual([...native.encodeInspectorResponse(Buffer.from([16, 1, 0x78]), 5)], [12, 1, 0x78]);
		// RpcsListRequest {id: 5}: union tag 6 in version 1, 4 in version 6.
		assert.deepEqual([...native.decodeInspectorRequest(Buffer.from([6, 5]), 1)], [4, 5]);
		// Error {message: "x"} in version 1: union tag 8.
		assert.deepEqual([...native.encodeInspectorResponse(Buffer.from([16, 1, 0x78]), 1)], [8, 1, 0x78]);
		for (const version of [0, 7]) {
			assert.throws(
				() => native.decodeInspectorRequest(Buffer.from([1, 5]), version),
				(err) => err.code === "inspector.unsupported_version",
			);
		}
		assert.throws(
			() => native.encodeInspectorResponse(Buffer.alloc(0), 6),
			(err) => err.code === "inspector.invalid_message",
		);
	});

	test("metadata() before serve() is napi.invalid_state; metrics() is Prometheus text", () => {
		const registry = new native.CoreRegistry();
		assert.throws(
			() => registry.metadata(),
			(err) => err.code === "napi.invalid_state",
		);
		const metrics = registry.metrics();
		assert.equal(metrics.status, 200);
		assert.equal(metrics.headers["content-type"], "text/plain; version=0.0.4");
		assert.match(metrics.body.toString(), /^rivetkit_native_active_actors 0$/m);
	});
});

describe("surface of @rivetkit/rivetkit-napi@3.0.0", () => {
	const reference = surface(referenceDts("3.0.0"));
	const mine = surface(ours);

	test("the reference 3.0.0 surface was parsed, and the reference loads", () => {
		assert.ok(reference.classes.size >= 16, `only ${reference.classes.size} classes parsed`);
		assert.deepEqual([...reference.classes.get("CancellationListener")], ["release"]);
		assert.match(reference.interfaces.get("JsServeConfig").get("engineSpawn"), /^boolean$/);
		// Its platform package is installed nested (2.3.19's is at the top).
		const loaded = require(REFERENCES["3.0.0"]);
		assert.equal(typeof loaded.CancellationListener, "function");
		assert.equal(typeof loaded.CoreRegistry, "function");
	});

	test("3.0 contract: index.d.ts declares every class, method and function", () => {
		const missing = missingDeclarations(reference, mine);
		assert.deepEqual(missing, [], `missing from index.d.ts:\n${missing.join("\n")}`);
	});

	test("3.0 contract: index.d.ts declares every interface field, with a type that admits the reference's", () => {
		const missing = missingFields(reference, mine);
		assert.deepEqual(missing, [], `missing from index.d.ts:\n${missing.join("\n")}`);
	});

	test("3.0 contract: index.js exports every class and function at runtime", () => {
		const missing = missingExports(reference);
		assert.deepEqual(missing, [], `missing from index.js:\n${missing.join("\n")}`);
	});

	test("3.0 contract: onCancelled returns a CancellationListener whose release() is idempotent", () => {
		const token = new native.CancellationToken();
		let fired = 0;
		const released = token.onCancelled(() => fired++);
		assert.ok(released instanceof native.CancellationListener, `got ${released}`);
		released.release();
		released.release();
		const kept = token.onCancelled(() => fired++);
		token.cancel();
		kept.release(); // a no-op after firing
		assert.equal(token.aborted(), true);
	});
});

const reference = surface(referenceDts("2.3.19"));
const isUnsupported = (err) => err?.code === "rivetkit-native.unsupported" || err?.group === "rivetkit-native";
// The registry's entry points are not probed: called with no arguments,
// `serve()` takes its config from the environment, whose default is a local
// engine on 127.0.0.1:6420, started if none runs there (this probe once left
// such an engine running after the suite). Every other test file serves.
const PROBE_SKIP = new Set([
	"constructor",
	"ActorContext.sleep",
	"ActorContext.destroy",
	"JsNativeDatabase.close",
	"CoreRegistry.serve",
	"CoreRegistry.serveListener",
	"CoreRegistry.serveApplicationListener",
	"CoreRegistry.handleServerlessRequest",
]);

/**
 * Calls each method of class `name` on `target` with no arguments (a
 * promise gets 2 s), recording into `found` every call that failed with
 * rivetkit-native.unsupported. Missing arguments give napi.invalid_argument.
 */
async function probeMethods(name, target, found, calls) {
	for (const method of reference.classes.get(name) ?? []) {
		if (PROBE_SKIP.has(method) || PROBE_SKIP.has(`${name}.${method}`)) continue;
		calls.push(`${name}.${method}`);
		const record = (err) => {
			if (isUnsupported(err)) found.add(`${name}.${method}`);
		};
		try {
			const result = target[method]();
			if (result && typeof result.then === "function") {
				result.catch(record);
				await Promise.race([result.catch(() => {}), new Promise((r) => setTimeout(r, 2_000))]);
			}
		} catch (err) {
			record(err);
		}
	}
}

/** Every class and function of the contract an action can reach. */
async function probeContract(ctx) {
	const found = new Set();
	const calls = [];
	for (const fn of reference.functions) {
		calls.push(fn);
		try {
			await native[fn]?.();
		} catch (err) {
			if (isUnsupported(err)) found.add(fn);
		}
	}
	const queue = ctx.queue();
	await queue.send("probe", cborEncode(1));
	const [message] = await queue.nextBatch({ names: ["probe"], count: 1, timeoutMs: 0 });
	const sqlTx = await ctx.sql().beginTransaction(5_000);
	const objects = [
		["Kv", ctx.kv()],
		["Queue", queue],
		["QueueMessage", message],
		["Schedule", ctx.schedule()],
		["JsSqliteTransaction", sqlTx],
	];
	for (const [name, target] of objects) await probeMethods(name, target, found, calls);
	await sqlTx.rollback().catch(() => {}); // the probe may have committed it
	const stateTx = await ctx.beginStateTransaction(5_000);
	await probeMethods("JsActorStateTransaction", stateTx, found, calls);
	await stateTx.rollback().catch(() => {});
	const span = await ctx.startWorkflowSpan();
	const step = span.ctx().startWorkflowStepSpan("probe", 1);
	const conn = await ctx.connectConn(cborEncode(null));
	const later = [
		["WorkflowStepSpan", step],
		["WorkflowSpan", span],
		["OutboundCall", ctx.startCallSpan("a", "b")],
		["ConnHandle", conn],
		["CancellationToken", new native.CancellationToken()],
		["CoreRegistry", new native.CoreRegistry()],
		["JsNativeDatabase", ctx.sql()],
		["ActorContext", ctx],
	];
	for (const [name, target] of later) await probeMethods(name, target, found, calls);
	return { unsupported: [...found].sort(), calls: calls.length };
}

describe("the contract on a live actor", () => {
	let engine;
	let host;
	let actorId;
	const seen = {};

	before(async () => {
		engine = await startEngine({ arch: "v3" });
		const factory = new native.NapiActorFactory(
			{
				createState: async () => cborEncode({ n: 0 }),
				actions: {
					ping: async () => cborEncode("pong"),
					// Calls every method of the contract reachable from an
					// action, with no arguments, and reports the ones that
					// failed with rivetkit-native.unsupported.
					probe: async (_err, { ctx }) => cborEncode(await probeContract(ctx)),
					runtimeSocket: async (_err, { ctx }) => {
						await ctx.provisionActorRuntimeSocket();
						return cborEncode("provisioned");
					},
					// The inspector's native side: the summary counters, and the
					// token check (no token: inspector.unauthorized).
					inspector: async (_err, { ctx }) => {
						const snapshot = ctx.inspectorSnapshot();
						let refused = null;
						try {
							await ctx.verifyInspectorAuth(null);
						} catch (err) {
							refused = err.code;
						}
						const converted = [
							...ctx.decodeInspectorRequest(Buffer.from([1, 5]), 5),
							...ctx.encodeInspectorResponse(Buffer.from([16, 1, 0x78]), 5),
						];
						return cborEncode({ snapshot, refused, converted });
					},
					// Queues and cron jobs are built: the calls RivetKit makes work.
					queueAndCron: async (_err, { ctx }) => {
						const queue = ctx.queue();
						const sent = await queue.send("jobs", cborEncode(1));
						const [got] = await queue.nextBatch({ names: ["jobs"], count: 1, timeoutMs: 0 });
						await ctx.schedule().cronEvery("tick", 60_000, "ping", cborEncode([]));
						const job = await ctx.schedule().cronGet("tick");
						return cborEncode({
							sameId: typeof sent.id() === "bigint" && got.id() === sent.id(),
							name: got.name(),
							maxSize: queue.maxSize(),
							job: job.kind,
							deleted: await ctx.schedule().cronDelete("tick"),
						});
					},
					disconnectSome: async (_err, { ctx }) => {
						const keep = await ctx.connectConn(cborEncode(null));
						const drop = await ctx.connectConn(cborEncode(null));
						const asked = [];
						await ctx.disconnectConns((conn) => {
							asked.push(conn.id());
							return conn.id() === drop.id();
						});
						const left = ctx.conns().map((c) => c.id());
						const result = {
							askedBoth: asked.includes(keep.id()) && asked.includes(drop.id()),
							keptKeep: left.includes(keep.id()),
							droppedDrop: !left.includes(drop.id()),
						};
						await keep.disconnect();
						return cborEncode(result);
					},
					harmless: async (_err, { ctx }) => {
						const rs = ctx.runtimeState();
						rs.hits = (rs.hits ?? 0) + 1;
						const region = ctx.beginWebsocketCallback();
						ctx.endWebsocketCallback(region);
						ctx.beginOnStateChange();
						ctx.endOnStateChange();
						ctx.setPreventSleep(true);
						// A workflow run and one step attempt under it (tracing spans).
						const span = await ctx.startWorkflowSpan();
						const runCtx = span.ctx();
						const step = runCtx.startWorkflowStepSpan("s", 1);
						const runTrace = runCtx.invocationTraceContext()?.span;
						const stepTrace = step?.ctx().invocationTraceContext()?.span;
						const workflowStep = {
							opened: step !== null,
							sameTrace: stepTrace?.traceId === runTrace?.traceId,
							ownSpan: /^[0-9a-f]{16}$/.test(stepTrace?.spanId) && stepTrace?.spanId !== runTrace?.spanId,
						};
						step.finish("retry", "boom");
						step.finish("ok");
						await span.finish("completed");
						await ctx.setRunWakeAt(Date.now() + 3_600_000);
						await ctx.setRunWakeAt(null);
						// Spans: a call span in a new trace, and one under an
						// application span (same trace, new span id).
						const TRACE = "4bf92f3577b34da6a3ce929d0e0e4736";
						const app = ctx.withApplicationSpan(`00-${TRACE}-00f067aa0ba902b7-01`, null);
						const call = ctx.startCallSpan("a", "b");
						const appCall = app.startCallSpan("a", "b");
						const spanShape = (c) => ({
							trace: /^[0-9a-f]{32}$/.test(c.traceId),
							span: /^[0-9a-f]{16}$/.test(c.spanId),
							flags: c.traceFlags,
						});
						call.finish();
						appCall.finish("failed");
						appCall.finish();
						await ctx.disconnectConns(() => false);
						Object.assign(seen, {
							sameRuntimeState: ctx.runtimeState() === rs,
							hits: rs.hits,
							// An HTTP action carries the gateway's ray ID and no span.
							trace: (({ rayId, ...rest }) => ({ rayId: typeof rayId === "string" && rayId.length > 0, ...rest }))(
								ctx.invocationTraceContext() ?? {},
							),
							appTrace: app.invocationTraceContext()?.span?.traceId,
							callSpan: spanShape(call.spanContext()),
							appCallInTrace:
								appCall.spanContext().traceId === TRACE && appCall.spanContext().spanId !== "00f067aa0ba902b7",
							stepSpan: ctx.startWorkflowStepSpan("s", 1),
							workflowStep,
							preventSleep: ctx.preventSleep(),
							pending: ctx.hasPendingHibernationChanges(),
							taken: ctx.takePendingHibernationChanges(),
							dirty: ctx.dirtyHibernatableConns(),
							tracked: await ctx.waitForTrackedShutdownWork(),
							same: ctx.sameActorInstance(ctx.withApplicationSpan(null, null)),
							spanCtxSame: ctx.sameActorInstance(span.ctx()),
							sqlKvError: ctx.sql().takeLastKvError(),
							destroyRequested: ctx.destroyRequested(),
						});
						return cborEncode(rs.hits);
					},
				},
			},
			{ sleepTimeoutMs: 60_000 },
		);
		host = await serveActors(engine, { compat: factory });
		actorId = (await getOrCreateActor(engine.endpoint, { name: "compat", key: "compat-1", pool: host.pool })).actor
			.actor_id;
	});

	after(async () => {
		await host?.stop();
		await engine?.stop();
	});

	test("queues and cron jobs work through the contract's classes", async () => {
		const res = await actionFetch(engine, actorId, "queueAndCron", { encoding: "json" });
		assert.equal(res.status, 200, JSON.stringify(res.body));
		assert.deepEqual(res.body.output, { sameId: true, name: "jobs", maxSize: 1000, job: "every", deleted: true });
	});

	test("inspectorSnapshot, verifyInspectorAuth and the inspector conversions work on ActorContext", async () => {
		const res = await actionFetch(engine, actorId, "inspector", { encoding: "json" });
		assert.equal(res.status, 200, JSON.stringify(res.body));
		const { snapshot, refused, converted } = res.body.output;
		assert.equal(refused, "inspector.unauthorized");
		assert.deepEqual(converted, [1, 5, 12, 1, 0x78]);
		assert.deepEqual(Object.keys(snapshot).sort(), [
			"activeConnections",
			"connectedClients",
			"connectionsRevision",
			"queueRevision",
			"queueSize",
			"stateRevision",
		]);
		assert.equal(snapshot.queueSize, 0);
		assert.equal(snapshot.connectedClients, 0);
		assert.ok(snapshot.stateRevision >= 1, "the initial state counts as a write");
	});

	test("provisionActorRuntimeSocket is built: an actor type without enableActorRuntimeSocket gets actor_runtime_socket.not_enabled", async () => {
		const res = await actionFetch(engine, actorId, "runtimeSocket", { encoding: "json" });
		// A public error (its message is kept), with the framework routes'
		// status of an error not in their table, as in the reference: 500.
		assert.equal(res.status, 500, JSON.stringify(res.body));
		assert.equal(res.body.group, "actor_runtime_socket");
		assert.equal(res.body.code, "not_enabled");
		assert.match(res.body.message, /enableActorRuntimeSocket/);
		const ok = await actionFetch(engine, actorId, "ping", { encoding: "json" });
		assert.equal(ok.status, 200, JSON.stringify(ok.body));
		assert.equal(ok.body.output, "pong");
	});

	test("harmless calls work, runtimeState persists per generation", async () => {
		// A caller's ray ID: engine 3.0's gateway gives a request none of its
		// own (ray-id.test.mjs).
		const headers = { "x-rivet-ray-id": "compat-ray-1" };
		const first = await actionFetch(engine, actorId, "harmless", { encoding: "json", headers });
		assert.equal(first.status, 200, JSON.stringify(first.body));
		const second = await actionFetch(engine, actorId, "harmless", { encoding: "json", headers });
		assert.equal(second.body.output, first.body.output + 1);
		assert.deepEqual(seen, {
			sameRuntimeState: true,
			hits: second.body.output,
			trace: { rayId: true },
			appTrace: "4bf92f3577b34da6a3ce929d0e0e4736",
			callSpan: { trace: true, span: true, flags: 1 },
			appCallInTrace: true,
			stepSpan: null,
			workflowStep: { opened: true, sameTrace: true, ownSpan: true },
			preventSleep: false,
			pending: false,
			taken: [],
			dirty: [],
			tracked: true,
			same: true,
			spanCtxSame: true,
			sqlKvError: null,
			destroyRequested: false,
		});
	});

	test("disconnectConns disconnects the connections the predicate picks", async () => {
		const res = await actionFetch(engine, actorId, "disconnectSome", { encoding: "json" });
		assert.equal(res.status, 200, JSON.stringify(res.body));
		assert.deepEqual(res.body.output, { askedBoth: true, keptKeep: true, droppedDrop: true });
	});

	test("no method of the contract reachable from an action throws rivetkit-native.unsupported", async () => {
		const probeId = (await getOrCreateActor(engine.endpoint, { name: "compat", key: "probe", pool: host.pool })).actor
			.actor_id;
		const res = await actionFetch(engine, probeId, "probe", { encoding: "json" });
		assert.equal(res.status, 200, JSON.stringify(res.body));
		assert.deepEqual(res.body.output.unsupported, []);
		assert.ok(res.body.output.calls >= 135, `only ${res.body.output.calls} calls`);
	});

	test("metadata() and metrics() while serving", () => {
		const meta = host.registry.metadata();
		assert.equal(meta.status, 200);
		const body = JSON.parse(meta.body.toString());
		assert.equal(body.runtime, "rivetkit");
		assert.equal(body.envoyProtocolVersion, 8);
		assert.deepEqual(body.envoy.kind, { normal: {} });
		assert.deepEqual(body.actorNames.compat, { metadata: {} });
		const metrics = host.registry.metrics().body.toString();
		assert.match(metrics, /^rivetkit_native_active_actors [1-9]\d*$/m);
	});
});
