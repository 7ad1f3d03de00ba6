// The engine-cluster faults under load, shared by __test__/cluster.test.mjs
// (asserts on ours) and bench/engine-cluster.mjs (ours and the reference
// side by side): counters incremented without pause through one engine
// node while a fault hits the cluster (helpers/cluster.mjs), then the
// figures of docs/deploy.md, "What a fault costs".
//
//   const figures = await underLoad({ client, keys, wakes, fault: FAULTS.hostNode(cluster, hostNodeIndex) });
//
// `wakes(key)` counts the starts of a counter on every host (a new
// generation each); `fault` is `{what, via, run}`: `via` is the node the
// clients use, `run()` applies the fault and resolves once it is over.

import { setTimeout as sleep } from "node:timers/promises";

import { everyCounterAnswersAgain, load, tally } from "./counter-load.mjs";
import { waitFor } from "./engine.mjs";

/** The faults of item 2 of the engine-cluster issue, by name. */
export const FAULTS = {
	/** SIGKILL of the node one host is on (the follower: no lease stall). */
	hostNode: (cluster) => {
		const victim = cluster.nodes.find((n) => n !== cluster.leader());
		return {
			what: "a host's node SIGKILLed",
			victim,
			via: cluster.nodes.find((n) => n !== victim),
			run: () => victim.kill(),
		};
	},
	/** SIGTERM of the leader: it hands its lease over. */
	leaderStop: (cluster) => {
		const leader = cluster.leader();
		return {
			what: "the leader stopped (SIGTERM)",
			victim: leader,
			via: cluster.nodes.find((n) => n !== leader),
			run: () => leader.stop(),
		};
	},
	/** SIGKILL of the leader: writes wait for its lease to expire. */
	leaderKill: (cluster) => {
		const leader = cluster.leader();
		return {
			what: "the leader SIGKILLed",
			victim: leader,
			via: cluster.nodes.find((n) => n !== leader),
			run: () => leader.kill(),
		};
	},
	/** NATS stopped for 10 s, then started again on its port. */
	natsDown: (cluster) => ({
		what: "NATS down 10 s",
		victim: null,
		via: cluster.nodes[0],
		run: async () => {
			await cluster.nats.stop();
			await sleep(10_000);
			await cluster.nats.start();
		},
	}),
};

/**
 * Runs the load on `client` (through `fault.via`), applies the fault, waits
 * until every counter answered again and 50 more increments, then reads
 * every count back. Resolves to `{what, answered, failed, codes,
 * backAfterMs, moved, lost, twice}`; `moved` lists the counters that
 * started again (a new generation) after the fault.
 */
export async function underLoad({ client, keys, wakes, fault, workers = 6, read }) {
	const traffic = load(client, { keys, workers });
	await waitFor(() => traffic.count >= 100, { timeoutMs: 60_000, what: "load warmed up" });
	const wakesBefore = new Map(keys.map((k) => [k, wakes(k)]));
	const at = Date.now();
	try {
		await fault.run();
		await everyCounterAnswersAgain(traffic, keys, `after ${fault.what}`);
		const settled = traffic.count;
		await waitFor(() => traffic.count >= settled + 50, { timeoutMs: 60_000, what: `load after ${fault.what}` });
	} catch (err) {
		// The load must not outlive the test (its loops would keep the process up),
		// and what it met is the failure's explanation.
		const { failures } = await traffic.stop();
		const silent = keys.filter((k) => !traffic.answeredAt.get(k).some((t) => t > at));
		const by = new Map();
		for (const f of failures) by.set(f.code, (by.get(f.code) ?? 0) + 1);
		const last = failures.slice(-3).map((f) => `+${f.at - at} ms ${f.key} ${f.code}: ${f.message}`);
		// Failures per 10 s since the fault, by code.
		const spans = new Map();
		for (const f of failures) {
			const span = `+${Math.floor((f.at - at) / 10_000) * 10} s ${f.code}`;
			spans.set(span, (spans.get(span) ?? 0) + 1);
		}
		err.message += `\ncounters silent since the fault: ${silent.join(", ") || "none"}; failures by code: ${[...by].map(([c, n]) => `${c} ${n}`).join(", ") || "none"}; per 10 s: ${[...spans].map(([s, n]) => `${s} ${n}`).join(", ")}; the last ones:\n${last.join("\n")}`;
		throw err;
	}
	const { answered, failures } = await traffic.stop();
	const back = keys.map((k) => traffic.answeredAt.get(k).find((t) => t > at) ?? Infinity);
	const { lost, twice } = await tally(client, answered, read);
	const by = new Map();
	for (const f of failures) by.set(f.code, (by.get(f.code) ?? 0) + 1);
	return {
		what: fault.what,
		answered: traffic.count,
		failed: failures.length,
		codes: [...by].map(([code, n]) => `${code} ${n}`).join(", ") || "-",
		backAfterMs: Math.max(...back) - at,
		moved: keys.filter((k) => wakes(k) > wakesBefore.get(k)),
		lost,
		twice,
	};
}

/** One line of figures, for a test's diagnostics or a bench's log. */
export const describeFigures = (f, total) =>
	`${f.what}: ${f.answered} increments answered, ${f.failed} failed (${f.codes}), every counter answering again ` +
	`${f.backAfterMs} ms after the fault, ${f.moved.length} of ${total} counters in a new generation, ${f.lost} lost, ${f.twice} answered twice`;
