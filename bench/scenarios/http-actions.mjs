// HTTP actions through the gateway with path routing by actor id:
// `POST /gateway/{actorId}/action/{get|increment}`, sequential and
// concurrent. `increment` saves the state (a KV write to the engine) on
// every call; `get` only reads it.

import { gatewayFetch, getOrCreateActor } from "../lib/engine.mjs";
import { measure } from "../lib/measure.mjs";

const BODIES = {
	json: () => JSON.stringify({ args: [1] }),
};

/** One action; throws unless it answers 200. */
async function action(endpoint, actorId, name = "increment", encoding = "json") {
	const res = await gatewayFetch(endpoint, actorId, `/action/${name}`, {
		method: "POST",
		headers: { "x-rivet-encoding": encoding, "content-type": "application/json" },
		body: BODIES[encoding](),
		signal: AbortSignal.timeout(30_000),
	});
	const body = await res.arrayBuffer();
	if (res.status !== 200) throw new Error(`status ${res.status}: ${Buffer.from(body).toString()}`);
}

export default {
	name: "http-actions",
	/** Rows for the table: one per load shape. */
	async run({ engine, host, pool, options }) {
		const actors = [];
		for (let i = 0; i < options.actors; i++) {
			const { actor } = await getOrCreateActor(engine.endpoint, { name: "counter", key: `bench-${i}`, pool });
			actors.push(actor.actor_id);
		}
		// Warm-up: every actor started, connections open.
		for (const id of actors) for (let i = 0; i < 5; i++) await action(engine.endpoint, id);

		const ctx = { host, enginePid: engine.pid };
		const rows = [];
		rows.push({
			scenario: `get sequential (${options.sequentialGet})`,
			...(await measure({ ...ctx, load: { total: options.sequentialGet, inFlight: 1, deadlineMs: 10_000 } }, () =>
				action(engine.endpoint, actors[0], "get"),
			)),
		});
		rows.push({
			scenario: `increment sequential (${options.sequential})`,
			...(await measure({ ...ctx, load: { total: options.sequential, inFlight: 1, deadlineMs: 15_000 } }, () =>
				action(engine.endpoint, actors[0]),
			)),
		});
		rows.push({
			scenario: `increment concurrent (${options.inFlight} in flight, ${options.concurrent})`,
			...(await measure(
				{ ...ctx, load: { total: options.concurrent, inFlight: options.inFlight, deadlineMs: 22_000 } },
				(i) => action(engine.endpoint, actors[i % actors.length]),
			)),
		});
		return rows;
	},
};
