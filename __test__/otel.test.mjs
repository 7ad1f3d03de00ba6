// Invocation spans over OTLP, sampled per actor (reference 2.3.24's
// `tracing` block; docs/telemetry.md). A real OTLP/HTTP receiver (a plain
// HTTP server reading the JSON the exporter posts) stands in for a
// collector; the engine is the real one.

import assert from "node:assert/strict";
import { createServer } from "node:http";
import { after, before, describe, test } from "node:test";

// Export must be configured before the addon's first span: the exporter
// reads the environment once, on first use.
const received = [];
const collector = createServer((req, res) => {
	let body = "";
	req.on("data", (chunk) => {
		body += chunk;
	});
	req.on("end", () => {
		received.push({ path: req.url, type: req.headers["content-type"], key: req.headers["x-team"], body });
		res.writeHead(200, { "content-type": "application/json" }).end("{}");
	});
});
await new Promise((resolve) => collector.listen(0, "127.0.0.1", resolve));
process.env.OTEL_EXPORTER_OTLP_ENDPOINT = `http://127.0.0.1:${collector.address().port}`;
process.env.OTEL_EXPORTER_OTLP_HEADERS = "x-team=blue";
process.env.OTEL_SERVICE_NAME = "otel-test";

const { createActor, gatewayFetch, startEngine } = await import("./helpers/engine.mjs");
const { json, native, serveActors } = await import("./helpers/actors.mjs");
const { actionFetch, cborEncode } = await import("./helpers/client.mjs");

const SAMPLED_PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const UNSAMPLED_PARENT = "00-5bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00";

/** Every span the collector got so far, after a flush. */
async function spans() {
	await native.shutdownTelemetry();
	return received.flatMap((r) =>
		JSON.parse(r.body).resourceSpans.flatMap((rs) =>
			rs.scopeSpans.flatMap((ss) => ss.spans.map((span) => ({ ...span, resource: rs.resource }))),
		),
	);
}

const attr = (span, key) => {
	const value = span.attributes.find((a) => a.key === key)?.value;
	return value?.stringValue ?? value?.doubleValue ?? value?.intValue;
};

/** The action's own view of its span. */
const spanOf = async (_err, { ctx }) => cborEncode(ctx.invocationTraceContext()?.span ?? null);

describe("invocation spans and per-actor sampling", () => {
	let engine;
	let host;
	const ids = {};

	before(async () => {
		engine = await startEngine({ arch: "v3" });
		const factory = (config, extra = {}) =>
			new native.NapiActorFactory(
				{
					createState: async () => json({}),
					actions: {
						hot: spanOf,
						cold: spanOf,
						fail: async () => {
							throw new Error("on purpose");
						},
					},
					...extra,
				},
				{ actions: [{ name: "hot" }, { name: "cold" }, { name: "fail" }], ...config },
			);
		host = await serveActors(engine, {
			always: factory({ tracing: { sampler: 1 } }),
			never: factory({ tracing: { sampler: 0 } }),
			mixed: factory({ tracing: { sampler: 0, actions: { hot: 1 } } }),
			plain: factory({}, { onRequest: async () => ({ status: 201, headers: {}, body: Buffer.from("made") }) }),
		});
		for (const name of ["always", "never", "mixed", "plain"]) {
			({ actor_id: ids[name] } = await createActor(engine.endpoint, { name, key: name, pool: host.pool }));
		}
	});

	after(async () => {
		await host?.stop();
		await engine?.stop();
		collector.close();
	});

	const call = async (actor, action, headers = {}) => {
		const res = await actionFetch(engine, ids[actor], action, { encoding: "json", headers });
		return { status: res.status, output: res.body.output };
	};

	test("a sampled action is exported with its actor, action, ray ID and rate", async () => {
		const { output: seen } = await call("always", "hot", { "x-rivet-ray-id": "ray-otel-1" });
		assert.equal(seen.traceFlags, 1, "the action sees a sampled span");
		const span = (await spans()).find((s) => s.spanId === seen.spanId);
		assert.ok(span, "the span the action saw was exported");
		assert.equal(span.traceId, seen.traceId);
		assert.equal(span.name, "always/hot");
		assert.equal(span.kind, 2);
		assert.equal(attr(span, "rivet.actor.id"), ids.always);
		assert.equal(attr(span, "rivet.actor.name"), "always");
		assert.equal(attr(span, "rivet.action.name"), "hot");
		assert.equal(attr(span, "rivet.invocation.type"), "action");
		assert.equal(attr(span, "rivet.ray.id"), "ray-otel-1");
		assert.equal(attr(span, "rivet.sampling.ratio"), 1);
		assert.equal(span.status.code, 0);
		assert.equal(attr(span.resource, "service.name"), "otel-test");
		const post = received.at(-1);
		assert.equal(post.path, "/v1/traces");
		assert.equal(post.type, "application/json");
		assert.equal(post.key, "blue", "OTEL_EXPORTER_OTLP_HEADERS sent");
	});

	test("a rate of 0 records nothing, and the action sees the span unsampled", async () => {
		const { output: seen } = await call("never", "hot");
		assert.equal(seen.traceFlags, 0);
		const all = await spans();
		assert.equal(all.filter((s) => s.name.startsWith("never/")).length, 0);
	});

	test("an action's own rate overrides the actor's", async () => {
		const hot = (await call("mixed", "hot")).output;
		const cold = (await call("mixed", "cold")).output;
		assert.deepEqual([hot.traceFlags, cold.traceFlags], [1, 0]);
		const names = (await spans()).map((s) => s.name);
		assert.ok(names.includes("mixed/hot"));
		assert.ok(!names.includes("mixed/cold"));
	});

	test("the caller's traceparent is the parent; an unsampled caller is followed, a rate never raises it", async () => {
		const child = (await call("plain", "hot", { traceparent: SAMPLED_PARENT })).output;
		assert.equal(child.traceId, SAMPLED_PARENT.split("-")[1]);
		const dropped = (await call("plain", "cold", { traceparent: UNSAMPLED_PARENT })).output;
		const raised = (await call("always", "cold", { traceparent: UNSAMPLED_PARENT })).output;
		assert.deepEqual([dropped.traceFlags, raised.traceFlags], [0, 0]);
		const all = await spans();
		const span = all.find((s) => s.spanId === child.spanId);
		assert.equal(span.parentSpanId, SAMPLED_PARENT.split("-")[2]);
		assert.equal(all.filter((s) => s.traceId === UNSAMPLED_PARENT.split("-")[1]).length, 0);
	});

	test("a failed action and a raw request carry their outcome", async () => {
		const failed = await call("always", "fail");
		assert.notEqual(failed.status, 200);
		const res = await gatewayFetch(engine.endpoint, ids.plain, "/request/thing", { method: "PUT" });
		assert.equal(res.status, 201);
		const all = await spans();
		const fail = all.find((s) => s.name === "always/fail");
		assert.equal(fail.status.code, 2);
		assert.ok(attr(fail, "error.type"), "error.type recorded");
		const request = all.find((s) => s.name === "plain/onRequest");
		assert.equal(attr(request, "http.request.method"), "PUT");
		assert.equal(attr(request, "http.response.status_code"), "201");
		assert.equal(attr(request, "rivet.invocation.type"), "request");
	});

	test("a bad rate or an unknown action name is refused when the factory is built", () => {
		const cases = [
			[{ tracing: { sampler: 2 } }, "config.tracing.sampler"],
			[{ tracing: { sampler: Number.NaN } }, "config.tracing.sampler"],
			[{ tracing: { actions: { hot: -0.5 } }, actions: [{ name: "hot" }] }, "config.tracing.actions.hot"],
			[{ tracing: { actions: { nope: 0.5 } }, actions: [{ name: "hot" }] }, "config.tracing.actions.nope"],
		];
		for (const [config, argument] of cases) {
			assert.throws(
				() => new native.NapiActorFactory({}, config),
				(err) => err.code === "napi.invalid_argument" && err.metadata?.argument === argument,
				JSON.stringify(config),
			);
		}
	});
});
