// The RivetKit app of the side-by-side comparison (bench/compare.mjs): plain
// `actor()`/`setup()` from "rivetkit", nothing addon-specific. The same file
// runs on @rivetkit/rivetkit-napi@2.3.19 and (a copy of it, made by
// bench/lib/rivetkit-alias.mjs) on rivetkit-native.
//
//   counter  actions: increment(by = 1) → count (state saved), get() → count
//   ledger   a state that grows by one entry per action, broadcast to every
//            connection (bench/matrix.mjs): append(note) → entries, fill(n)
//            → entries (n entries at once, to give it a size)
//   notes    an embedded SQLite database (`db({ onMigrate })`), for
//            bench/sqlite.mjs: insert(body) → id; timed(kind, n, inFlight)
//            → the latency in ms of each of `n` single-row statements run in
//            the actor, `inFlight` at a time; sqlError() and failUncaught()
//            for the shape of SQL errors
//
// Actors stay awake (sleepTimeout 10 min) so "live actors" stay live while
// they are counted.

import { actor, queue, setup } from "rivetkit";
import { db } from "rivetkit/db";

// BENCH_LOG_WAKES=1 (bench/engine-cluster.mjs): each start of a counter is
// a line on stderr, so that a new generation can be counted.
const logWakes = process.env.BENCH_LOG_WAKES === "1";

export const counter = actor({
	state: { count: 0 },
	onWake: (c) => {
		if (logWakes) console.error(`counter ${c.key.join("/")} awake`);
	},
	actions: {
		increment: (c, by = 1) => {
			c.state.count += by;
			return c.state.count;
		},
		get: (c) => c.state.count,
	},
	options: { sleepTimeout: 600_000 },
});

const entry = (c, note) => ({ i: c.state.entries.length, at: Date.now(), note });

export const ledger = actor({
	state: { entries: [] },
	actions: {
		append: (c, note) => {
			const e = entry(c, note);
			c.state.entries.push(e);
			c.broadcast("appended", e);
			return c.state.entries.length;
		},
		fill: (c, n) => {
			for (let k = 0; k < n; k++) c.state.entries.push(entry(c, `fill ${k}`));
			return c.state.entries.length;
		},
	},
	options: { sleepTimeout: 600_000 },
});

export const notes = actor({
	db: db({
		onMigrate: async (db) => {
			await db.execute("CREATE TABLE IF NOT EXISTS notes (id INTEGER PRIMARY KEY AUTOINCREMENT, body TEXT NOT NULL)");
		},
	}),
	actions: {
		insert: async (c, body) => (await c.db.execute("INSERT INTO notes (body) VALUES (?) RETURNING id", body))[0].id,
		timed: async (c, kind, n, inFlight = 1) => {
			const [{ top }] = await c.db.execute("SELECT COALESCE(MAX(id), 0) AS top FROM notes");
			const latencies = [];
			let next = 0;
			const worker = async () => {
				while (next < n) {
					const i = next++;
					const t0 = performance.now();
					if (kind === "insert") await c.db.execute("INSERT INTO notes (body) VALUES (?)", `note ${i}`);
					else await c.db.execute("SELECT id, body FROM notes WHERE id = ?", 1 + (i % Math.max(1, top)));
					latencies.push(performance.now() - t0);
				}
			};
			await Promise.all(Array.from({ length: inFlight }, worker));
			return latencies;
		},
		sqlError: async (c) => {
			await c.db.execute("INSERT OR IGNORE INTO notes (id, body) VALUES (1, 'one')");
			try {
				await c.db.execute("INSERT INTO notes (id, body) VALUES (1, 'again')");
				return null;
			} catch (err) {
				return { group: err.group, code: err.code, error: err.metadata?.error ?? null };
			}
		},
		failUncaught: async (c) => await c.db.execute("SELEKT 1"),
	},
	options: { sleepTimeout: 600_000 },
});

/** Per `jobs` actor: latencies not read yet, and the `handled` call waiting. */
const jobsSeen = new Map();
const seen = (c) => {
	if (!jobsSeen.has(c.actorId)) jobsSeen.set(c.actorId, { latencies: [], waiting: null });
	return jobsSeen.get(c.actorId);
};

// Each message's body is `{i, sentAt}`, `sentAt` the sender's Date.now()
// right before its send (the sender runs on this machine). Sent by a JSON
// client, a number past 32 bits reaches RivetKit 3.0.0's run loop as a
// BigInt, on either napi (a CBOR client's as a number), so both are read
// through Number().
export const jobs = actor({
	state: { count: 0, sum: 0 },
	queues: { n: queue() },
	run: async (c) => {
		for await (const message of c.queue.iter({ names: ["n"] })) {
			c.state.count += 1;
			c.state.sum += Number(message.body.i);
			const s = seen(c);
			s.latencies.push(Date.now() - Number(message.body.sentAt));
			if (s.waiting && c.state.count >= s.waiting.n) s.waiting.resolve();
		}
	},
	actions: {
		handled: async (c, n) => {
			const s = seen(c);
			if (c.state.count < n) await new Promise((resolve) => (s.waiting = { n, resolve }));
			s.waiting = null;
			await c.saveState({ immediate: true });
			const latencies = s.latencies;
			s.latencies = [];
			return latencies;
		},
	},
	options: { sleepTimeout: 600_000 },
});

export const registry = setup({ use: { counter, ledger, notes, jobs }, noWelcome: true });
