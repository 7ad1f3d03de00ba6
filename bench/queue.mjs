// Queue messages side by side: the `jobs` actor of bench/apps/rivetkit-app.mjs
// on the reference @rivetkit/rivetkit-napi ("theirs") and on
// rivetkit-native ("ours"), for one RivetKit version (a stack of
// bench/lib/stacks.mjs, on an engine of its version), both hosts up on one
// engine, each on a pool of its own, one warm actor per side.
//
// The client sends `messages` messages (`handle.send("n", {i, sentAt})`, one
// at a time); the actor's run loop (`c.queue.iter`) receives each and adds
// it to its state; then one `handled(n)` call waits until the run loop has
// handled them all and saves the state (`saveState({immediate: true})`, so
// that on ours the save that consumes the last messages is inside the
// window; docs/queues-cron.md, "Consumed with the state"). Reported per
// message: the host's CPU over that window (send, receive, handling, the
// saves), of it the host's JavaScript thread (as in bench/matrix.mjs), the
// send→handled latency (the sender's Date.now() before the send to the run
// loop's, both on this machine) and the client's send latency. In `rounds`
// chunks taken by the two hosts in turns (the side going first
// alternates), after a warm-up of 10 messages per side.
//
// Knobs (environment): BENCH_QUEUE_MESSAGES=300 (messages per side, over
// all rounds), BENCH_ROUNDS=3, BENCH_ADDON (ours: another build's index.js),
// BENCH_RIVETKIT (run on its own: the first version it names; default 3).
// About a minute per version on 2 cores.

import { fileURLToPath } from "node:url";

import { newClient, STACK_2_3 } from "./compare.mjs";
import { startBenchEngine } from "./lib/engine.mjs";
import { spawnSideHost } from "./lib/host.mjs";
import { int } from "./lib/knobs.mjs";
import { run } from "./lib/load.mjs";
import { mainThreadCpuMs } from "./lib/proc.mjs";
import { loadStack, stackKeys } from "./lib/stacks.mjs";
import { fmt, summarize, table } from "./lib/stats.mjs";

export const queueOptions = () => ({
	messages: int("BENCH_QUEUE_MESSAGES", 300),
	rounds: int("BENCH_ROUNDS", 3),
});

const WARM_UP = 10;

/**
 * Sends `count` messages to `side`'s actor and waits until all are
 * handled: `{hostCpuMs, jsThreadCpuMs, handled (ms), sends (ms), errors}`.
 */
async function round(side, count) {
	const before = await side.host.cpu();
	const jsBefore = mainThreadCpuMs(side.host.pid);
	const first = side.sent;
	const sent = await run({ total: count, inFlight: 1, deadlineMs: 120_000 }, (i) =>
		side.actor.send("n", { i: first + i, sentAt: Date.now() }),
	);
	side.sent += count;
	const handled = await side.actor.handled(side.sent);
	const after = await side.host.cpu();
	const jsAfter = mainThreadCpuMs(side.host.pid);
	return {
		hostCpuMs: after.userMs + after.systemMs - (before.userMs + before.systemMs),
		jsThreadCpuMs: jsBefore === null || jsAfter === null ? Number.NaN : jsAfter - jsBefore,
		handled,
		sends: sent.latencies,
		errors: sent.errors,
	};
}

/** Runs the queue part of `stack` (default RivetKit 2.3.19) against `engine`; returns `{sides, notes}`. */
export async function runQueue({ engine, stack = STACK_2_3, options = queueOptions(), log = console.log }) {
	const notes = [];
	const sides = [];
	try {
		for (const spec of stack.sides) {
			const pool = `queue-${spec.side}-${process.pid}`;
			const host = await spawnSideHost({ engine, stack, spec, pool });
			const client = newClient(engine, pool, "json", stack);
			sides.push({ spec, host, client, sent: 0, rounds: [] });
			await host.ready;
			const side = sides.at(-1);
			side.actor = client.jobs.getOrCreate([`jobs-${spec.side}-${process.pid}`]);
			await round(side, WARM_UP);
		}
		for (let r = 0; r < options.rounds; r++) {
			const order = r % 2 === 0 ? [0, 1] : [1, 0];
			const count = Math.floor(options.messages / options.rounds) + (r < options.messages % options.rounds ? 1 : 0);
			for (const s of order) sides[s].rounds.push(await round(sides[s], count));
		}
		const results = sides.map((side) => {
			const messages = side.rounds.reduce((n, r) => n + r.handled.length, 0);
			const sum = (key) => side.rounds.reduce((n, r) => n + r[key], 0);
			const errors = side.rounds.flatMap((r) => r.errors);
			if (errors.length) notes.push(`${side.spec.label}: ${errors.length} sends failed (${errors[0].message})`);
			return {
				side: side.spec.side,
				label: side.spec.label,
				messages,
				hostCpuMsPerMessage: sum("hostCpuMs") / (messages || 1),
				jsThreadCpuMsPerMessage: sum("jsThreadCpuMs") / (messages || 1),
				handled: summarize(side.rounds.flatMap((r) => r.handled)),
				sends: summarize(side.rounds.flatMap((r) => r.sends)),
			};
		});
		log(
			`queue: host CPU ms per message ${results.map((r) => `${r.side} ${fmt(r.hostCpuMsPerMessage, 3)}`).join(", ")}`,
		);
		return { results, notes };
	} finally {
		for (const side of sides) {
			await side.host.kill();
			await side.client.dispose();
		}
	}
}

/** The queue part as text: one row per figure, theirs, ours and the ratio. */
export function reportQueue({ results, notes }, options = queueOptions()) {
	const [theirs, ours] = results;
	const row = (figure, get, digits) => ({
		figure,
		[theirs.label]: fmt(get(theirs), digits),
		[ours.label]: fmt(get(ours), digits),
		"ours / theirs": fmt(get(ours) / get(theirs), 2),
	});
	const rows = [
		row("host CPU ms per message (sent, received, handled, saved)", (r) => r.hostCpuMsPerMessage, 3),
		row("  of it the JS thread", (r) => r.jsThreadCpuMsPerMessage, 3),
		row("send → handled p50 ms", (r) => r.handled.p50, 1),
		row("send → handled p99 ms", (r) => r.handled.p99, 1),
		row("client's send p50 ms", (r) => r.sends.p50, 1),
		row("messages handled", (r) => r.messages, 0),
	];
	const out = [table(["figure", theirs.label, ours.label, "ours / theirs"], rows)];
	out.push(
		`(one actor per side; ${options.messages} messages sent one at a time, in ${options.rounds} chunks per side in turns, after ${WARM_UP} to warm up)`,
	);
	for (const note of notes) out.push(`note: ${note}`);
	return out.join("\n");
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
	const stack = await loadStack(stackKeys()[0]);
	const engine = await startBenchEngine({ arch: stack.engineArch });
	try {
		const options = queueOptions();
		console.log(stack.title);
		console.log(reportQueue(await runQueue({ engine, stack, options }), options));
	} finally {
		await engine.stop();
	}
}
