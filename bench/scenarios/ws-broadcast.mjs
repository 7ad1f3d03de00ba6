// Broadcast fan-out over actor-connect WebSockets: `BENCH_FANOUT_CONNS`
// (50) connections to one `chat` actor subscribe to "msg"; another
// connection (not subscribed) calls `broadcast(seq)` `BENCH_BROADCASTS`
// (100) times, one at a time. Latency is from sending the action to the
// moment the last of the N connections got that event. The CPU columns are
// per delivered message (broadcasts × N); each includes 1/N of an action
// call. Plain `ws` client, JSON frames (BENCH_WS_ENCODING=cbor for CBOR).

import { getOrCreateActor } from "../lib/engine.mjs";
import { int } from "../lib/knobs.mjs";
import { processCpuMs } from "../lib/proc.mjs";
import { summarize } from "../lib/stats.mjs";
import { connectActor } from "../lib/ws.mjs";
import { WS_ENCODING } from "./ws-actions.mjs";

/** How long one broadcast may take to reach every connection. */
const DELIVERY_TIMEOUT_MS = 10_000;
/** Stop starting broadcasts after this much wall time. */
const DEADLINE_MS = 20_000;

export default {
	name: "ws-broadcast",
	async run({ engine, host, pool }) {
		const n = int("BENCH_FANOUT_CONNS", 50);
		const total = int("BENCH_BROADCASTS", 100);
		const { actor } = await getOrCreateActor(engine.endpoint, { name: "chat", key: "bench-fanout", pool });
		const actorId = actor.actor_id;

		const caller = await connectActor(engine.endpoint, actorId, { encoding: WS_ENCODING });
		const listeners = [];
		// seq → {remaining, last, done}
		const waiting = new Map();
		try {
			for (let i = 0; i < n; i += 10) {
				const batch = Array.from({ length: Math.min(10, n - i) }, () =>
					connectActor(engine.endpoint, actorId, { encoding: WS_ENCODING }),
				);
				listeners.push(...(await Promise.all(batch)));
			}
			for (const conn of listeners) {
				conn.onEvent = (name, args, receivedAt) => {
					if (name !== "msg") return;
					const entry = waiting.get(args[0]);
					if (!entry) return;
					entry.last = Math.max(entry.last, receivedAt);
					if (--entry.remaining === 0) entry.done();
				};
				conn.subscribe("msg");
			}
			// Subscriptions are handled in order before later frames: one
			// round trip per connection makes sure every one is in place.
			await Promise.all(listeners.map((c) => c.action("echo", [0])));

			const broadcastOnce = async (seq) => {
				let done;
				const delivered = new Promise((resolve) => (done = resolve));
				const entry = { remaining: n, last: 0, done };
				waiting.set(seq, entry);
				const t0 = performance.now();
				let timer;
				try {
					const reply = caller.action("broadcast", [seq]);
					reply.catch(() => {}); // awaited below, unless delivery times out first
					await Promise.race([
						delivered,
						new Promise((_, reject) => {
							timer = setTimeout(
								() =>
									reject(
										new Error(
											`broadcast ${seq}: ${entry.remaining} of ${n} connections did not get it within ${DELIVERY_TIMEOUT_MS} ms`,
										),
									),
								DELIVERY_TIMEOUT_MS,
							);
						}),
					]);
					await reply;
					return entry.last - t0;
				} finally {
					clearTimeout(timer);
					waiting.delete(seq);
				}
			};
			// Warm-up.
			for (let seq = 0; seq < 5; seq++) await broadcastOnce(`warm-${seq}`);

			const hostBefore = await host.cpu();
			const engineBefore = processCpuMs(engine.pid);
			const latencies = [];
			const errors = [];
			const started = performance.now();
			for (let seq = 0; seq < total && performance.now() - started < DEADLINE_MS; seq++) {
				try {
					latencies.push(await broadcastOnce(seq));
				} catch (err) {
					errors.push(err);
				}
			}
			const wallMs = performance.now() - started;
			const hostAfter = await host.cpu();
			const engineAfter = processCpuMs(engine.pid);

			const messages = latencies.length * n;
			const hostCpuMs = hostAfter.userMs + hostAfter.systemMs - (hostBefore.userMs + hostBefore.systemMs);
			const engineCpuMs = engineBefore === null || engineAfter === null ? Number.NaN : engineAfter - engineBefore;
			return [
				{
					scenario: `ws broadcast to ${n} conns (${total}; CPU per delivered msg)`,
					ops: latencies.length,
					errors: errors.length,
					firstError: errors[0]?.message,
					...summarize(latencies),
					perSecond: (latencies.length * 1000) / wallMs,
					hostCpuMsPerOp: hostCpuMs / (messages || 1),
					engineCpuMsPerOp: engineCpuMs / (messages || 1),
					hostRssMb: hostAfter.rssBytes / (1024 * 1024),
				},
			];
		} finally {
			await Promise.all([caller, ...listeners].map((c) => c.close()));
		}
	},
};
