// Counter load for the cluster scenarios (__test__/cluster-safety.test.mjs,
// bench/cluster.mjs): clients increment counters without pause over HTTP
// and WebSocket and record every answer, so that a fault's cost can be
// read off afterwards: failed requests, the longest stall, values answered
// twice, increments lost.

import { setTimeout as sleep } from "node:timers/promises";

import { waitFor } from "./engine.mjs";

/**
 * Increments `keys` without pause over HTTP (`workers` loops) and over one
 * WebSocket connection per key of `wsKeys`, recording every answer.
 * `stop()` ends the loops and resolves to the record.
 */
export function load(client, { keys, workers = 6, wsKeys = [] }) {
	const answered = new Map([...keys, ...wsKeys].map((k) => [k, []]));
	// When each answer came (ms since the epoch), for a failure's timeline.
	const answeredAt = new Map([...keys, ...wsKeys].map((k) => [k, []]));
	const record = (key, value) => {
		answered.get(key).push(value);
		answeredAt.get(key).push(Date.now());
	};
	const failures = [];
	const closes = [];
	let running = true;
	let next = 0;
	let longestStall = 0;
	let stalled = null;
	const loops = [];
	const stall = (key, via, began) => {
		const took = Date.now() - began;
		if (took > longestStall) {
			longestStall = took;
			stalled = { key, via, at: new Date(began).toISOString(), ms: took };
		}
	};
	for (let w = 0; w < workers; w++) {
		loops.push(
			(async () => {
				while (running) {
					const key = keys[next++ % keys.length];
					const began = Date.now();
					try {
						record(key, await client.counter.getOrCreate([key]).increment(1));
					} catch (err) {
						failures.push({
							key,
							via: "http",
							code: `${err.group}.${err.code}`,
							message: String(err.message).slice(0, 200),
							at: Date.now(),
						});
						// As the WebSocket loop: a call that fails at once must not spin.
						await sleep(50);
					}
					stall(key, "http", began);
				}
			})(),
		);
	}
	const conns = wsKeys.map((key) => {
		const conn = client.counter.getOrCreate([key]).connect();
		conn.onClose?.(() => closes.push(key));
		loops.push(
			(async () => {
				while (running) {
					const began = Date.now();
					try {
						record(key, await conn.increment(1));
					} catch (err) {
						failures.push({
							key,
							via: "ws",
							code: `${err.group}.${err.code}`,
							message: String(err.message).slice(0, 200),
							at: Date.now(),
						});
						await sleep(50);
					}
					stall(key, "ws", began);
				}
			})(),
		);
		return conn;
	});
	return {
		answered,
		answeredAt,
		get count() {
			return [...answered.values()].reduce((n, v) => n + v.length, 0);
		},
		async stop() {
			running = false;
			await Promise.all(loops);
			// Closes seen under load only: disposing closes each connection too.
			const closedUnderLoad = [...closes];
			for (const conn of conns) await conn.dispose?.();
			return { answered, answeredAt, failures, closes: closedUnderLoad, longestStall, stalled };
		},
	};
}

/** Waits until each of `keys` has answered once more than it had now. */
export async function everyCounterAnswersAgain(traffic, keys, when) {
	const at = new Map(keys.map((k) => [k, traffic.answered.get(k).length]));
	await waitFor(() => keys.every((k) => traffic.answered.get(k).length > at.get(k)), {
		timeoutMs: 90_000,
		what: `every counter answers ${when}`,
	});
}

/**
 * What a value answered twice needs to be explained (an intermittent one
 * must not need a rerun): when each copy was answered, and every host line
 * about that counter (its starts, stops and wakes, with their generations).
 */
export function explainDupes(traffic, apps) {
	const out = [];
	for (const [key, values] of traffic.answered) {
		const dupes = values.filter((v, i) => values.indexOf(v) !== i);
		if (!dupes.length) continue;
		const at = traffic.answeredAt.get(key);
		for (const v of new Set(dupes)) {
			const when = values.flatMap((x, i) => (x === v ? [new Date(at[i]).toISOString()] : []));
			out.push(`${key}: ${v} answered at ${when.join(", ")}`);
		}
		const ids = new Set();
		for (const app of apps) {
			for (const m of app.out.matchAll(new RegExp(`actorId: "([a-z0-9]+)"[^\\n]*key: "${key}"`, "g"))) ids.add(m[1]);
		}
		const about = new RegExp(`counter ${key} |${[...ids].join("|") || key}`);
		for (const app of apps) {
			for (const line of app.out.split("\n")) {
				if (
					about.test(line) &&
					!/DEBUG envoy_connection/.test(line) &&
					/awake|going to sleep|CommandStartActor|CommandStopActor|envoy actor stopped|lost|restarting|parked/.test(
						line,
					)
				) {
					out.push(`${app.name}: ${line.slice(0, 300)}`);
				}
			}
		}
	}
	return out.slice(0, 200).join("\n");
}

/**
 * Per counter: the values answered twice, and how many answered
 * increments the final count (`read(handle)`) does not hold.
 */
export async function tally(client, answered, read = (handle) => handle.getCount()) {
	let lost = 0;
	let twice = 0;
	for (const [key, values] of answered) {
		twice += values.filter((v, i) => values.indexOf(v) !== i).length;
		const final = await read(client.counter.getOrCreate([key]));
		if (final < values.length) lost += values.length - final;
	}
	return { lost, twice };
}
