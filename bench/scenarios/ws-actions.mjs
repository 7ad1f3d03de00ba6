// Actions over the actor-connect WebSocket, through the gateway with path
// routing by actor id (`/gateway/{actorId}/connect`), with a plain `ws`
// client and JSON frames (BENCH_WS_ENCODING=cbor for CBOR): sequential on
// one connection, and `inFlight` concurrent spread over one connection per
// actor. `echo` touches no state, so this is the socket path alone: client
// → engine gateway → envoy tunnel → host → actor JS and back.
//
// Also measured on the way: opening a connection (upgrade through the
// gateway, connection hooks, `Init`).

import { getOrCreateActor } from "../lib/engine.mjs";
import { measure } from "../lib/measure.mjs";
import { connectActor } from "../lib/ws.mjs";

export const WS_ENCODING = process.env.BENCH_WS_ENCODING === "cbor" ? "cbor" : "json";

export default {
	name: "ws-actions",
	async run({ engine, host, pool, options }) {
		const actors = [];
		for (let i = 0; i < options.actors; i++) {
			const { actor } = await getOrCreateActor(engine.endpoint, { name: "chat", key: `bench-ws-${i}`, pool });
			actors.push(actor.actor_id);
		}
		const ctx = { host, enginePid: engine.pid };
		const rows = [];
		const conns = [];
		try {
			// Warm-up: every actor started, one connection each.
			for (const id of actors) {
				const conn = await connectActor(engine.endpoint, id, { encoding: WS_ENCODING });
				conns.push(conn);
				for (let i = 0; i < 5; i++) await conn.action("echo", [i]);
			}

			const opened = [];
			rows.push({
				scenario: `ws connect + Init sequential (20, ${WS_ENCODING})`,
				...(await measure({ ...ctx, load: { total: 20, inFlight: 1, deadlineMs: 10_000 } }, async () => {
					opened.push(await connectActor(engine.endpoint, actors[0], { encoding: WS_ENCODING }));
				})),
			});
			await Promise.all(opened.map((c) => c.close()));

			rows.push({
				scenario: `ws echo sequential (${options.sequential}, ${WS_ENCODING})`,
				...(await measure({ ...ctx, load: { total: options.sequential, inFlight: 1, deadlineMs: 12_000 } }, (i) =>
					conns[0].action("echo", [i]),
				)),
			});
			rows.push({
				scenario: `ws echo concurrent (${options.inFlight} in flight over ${conns.length} conns, ${options.concurrent})`,
				...(await measure(
					{ ...ctx, load: { total: options.concurrent, inFlight: options.inFlight, deadlineMs: 12_000 } },
					(i) => conns[i % conns.length].action("echo", [i]),
				)),
			});
		} finally {
			await Promise.all(conns.map((c) => c.close()));
		}
		return rows;
	},
};
