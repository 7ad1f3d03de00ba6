// The SQLite side-by-side: the `notes` actor of bench/apps/rivetkit-app.mjs
// (RivetKit's `db({ onMigrate })`) on @rivetkit/rivetkit-napi@2.3.19 and on
// rivetkit-native, one host after the other against one engine, like
// bench/compare.mjs (same hosts, same client, same resolve hook).
//
// Per side, one host on a pool of its own:
//   latency  single-row INSERT and SELECT by primary key, timed inside the
//            actor around each `c.db.execute` (so the figure is the SQL path:
//            addon, page store, engine; not the client's transport), 200
//            sequential and 200 with 8 in flight, on one warm actor;
//   errors   what an action sees of a UNIQUE violation, and what the client
//            sees of a syntax error it does not catch;
//   RSS      RSS per actor with an open database: actors woken with one
//            INSERT each (their database opened, migrated and written),
//            measured like compare.mjs's RSS (full GC, memory settled) after
//            the first `sqlActors[0]` and again after `sqlActors[1]` in all;
//            with the count of SQLite worker threads in the host (one per
//            open database, on both addons).
// Our host runs with its open-database bound and idle close raised
// (RIVETKIT_NATIVE_SQLITE_MAX_OPEN, RIVETKIT_NATIVE_SQLITE_IDLE_CLOSE_MS) so
// that every woken actor keeps its database open while it is measured; with
// the defaults at most 512 stay open (docs/sqlite.md).
//
// Knobs (environment): BENCH_SQL_OPS=200 (statements per latency figure),
// BENCH_SQL_IN_FLIGHT=8, BENCH_SQL_ACTORS=100,1000, BENCH_WAKE_IN_FLIGHT=2,
// BENCH_COMPARE_ENCODING=bare, BENCH_ADDON (ours: another build's index.js).

import { readdirSync, readFileSync } from "node:fs";

import { engineSettled, upsertRunnerConfig } from "./lib/engine.mjs";
import { spawnHost } from "./lib/host.mjs";
import { run } from "./lib/load.mjs";
import { fmt, summarize, table } from "./lib/stats.mjs";
import { envoyRegistered, newClient, SIDES, settledMemory } from "./compare.mjs";

const int = (name, fallback) => {
	const value = Number.parseInt(process.env[name] ?? "", 10);
	return Number.isFinite(value) && value > 0 ? value : fallback;
};

export const sqliteOptions = () => ({
	ops: int("BENCH_SQL_OPS", 200),
	inFlight: int("BENCH_SQL_IN_FLIGHT", 8),
	actors: (process.env.BENCH_SQL_ACTORS ?? "100,1000")
		.split(",")
		.map((n) => Number.parseInt(n, 10))
		.filter((n) => n > 0)
		.sort((a, b) => a - b),
	wakeInFlight: int("BENCH_WAKE_IN_FLIGHT", 2),
	encoding: process.env.BENCH_COMPARE_ENCODING ?? "bare",
});

/** Threads of `pid` named like the page store client's SQLite workers. */
function sqliteWorkers(pid) {
	try {
		return readdirSync(`/proc/${pid}/task`).filter((tid) => {
			try {
				return readFileSync(`/proc/${pid}/task/${tid}/comm`, "utf8").startsWith("sqlite-worker");
			} catch {
				return false;
			}
		}).length;
	} catch {
		return Number.NaN;
	}
}

/** Wakes `notes` actor `key` with one INSERT (getOrCreate), trying twice. */
async function wake(client, key) {
	try {
		await client.notes.getOrCreate([key]).insert("hello");
	} catch {
		await client.notes.getOrCreate([key]).insert("hello");
	}
}

const errorText = (e) => (e ? `${e.group}.${e.code}` : "none");

async function sidePhase({ engine, spec, options, out, log }) {
	const pool = `sql-${spec.side}-${process.pid}`;
	await upsertRunnerConfig(engine.endpoint, pool);
	const client = newClient(engine, pool, options.encoding);
	const env =
		spec.side === "ours" ? { RIVETKIT_NATIVE_SQLITE_MAX_OPEN: "100000", RIVETKIT_NATIVE_SQLITE_IDLE_CLOSE_MS: "86400000" } : {};
	const host = spawnHost({ impl: spec.impl, endpoint: engine.endpoint, pool, token: engine.token, env });
	try {
		await envoyRegistered(engine.endpoint, pool, host);
		await host.ready;
		const notes = client.notes.getOrCreate([`${spec.side}-latency`]);
		await notes.insert("warm");
		await notes.timed("insert", 20, 1);
		for (const [name, kind, inFlight] of [
			["insertSeq", "insert", 1],
			["selectSeq", "select", 1],
			["insertConc", "insert", options.inFlight],
			["selectConc", "select", options.inFlight],
		]) {
			out[name] = summarize(await notes.timed(kind, options.ops, inFlight));
		}
		log(
			`${spec.label}: in-actor INSERT p50 ${fmt(out.insertSeq.p50, 2)} ms, SELECT p50 ${fmt(out.selectSeq.p50, 2)} ms ` +
				`(sequential); ${options.inFlight} in flight: ${fmt(out.insertConc.p50, 2)} / ${fmt(out.selectConc.p50, 2)} ms`,
		);

		out.caught = await notes.sqlError();
		out.uncaught = await notes.failUncaught().then(
			() => null,
			(err) => ({ group: err.group, code: err.code }),
		);

		await wake(client, `${spec.side}-rss-warm`);
		const before = await settledMemory(host);
		out.rss = [];
		let woken = 0;
		for (const target of options.actors) {
			const result = await run({ total: target - woken, inFlight: options.wakeInFlight, deadlineMs: 300_000 }, (i) =>
				wake(client, `${spec.side}-rss-${woken + i}`),
			);
			woken += result.latencies.length;
			if (result.errors.length) out.notes.push(`${result.errors.length} wakes failed: ${result.errors[0].message}`);
			const after = await settledMemory(host);
			const workers = sqliteWorkers(host.pid);
			out.rss.push({
				target,
				actors: woken,
				perActorKb: woken ? (after.rssBytes - before.rssBytes) / 1024 / woken : Number.NaN,
				afterMb: after.rssBytes / (1024 * 1024),
				workers,
			});
			log(`${spec.label}: ${woken} SQL actors woken: RSS ${fmt(after.rssBytes / (1024 * 1024))} MB, ${workers} SQLite worker threads`);
		}
		out.beforeMb = before.rssBytes / (1024 * 1024);
	} finally {
		await host.kill();
		await client.dispose();
	}
	await engineSettled(engine.pid, { timeoutMs: 20_000 });
}

function report(results, options) {
	const t = results.theirs;
	const o = results.ours;
	const rows = [];
	const ratio = (ov, tv) => (Number.isFinite(ov) && Number.isFinite(tv) && tv !== 0 ? fmt(ov / tv, 2) : "-");
	const row = (figure, get, digits = 2) => {
		const tv = get(t) ?? Number.NaN;
		const ov = get(o) ?? Number.NaN;
		rows.push({ figure, theirs: fmt(tv, digits), ours: fmt(ov, digits), ratio: ratio(ov, tv) });
	};
	const seq = `${options.ops} sequential`;
	const conc = `${options.ops}, ${options.inFlight} in flight`;
	row(`INSERT p50 ms (${seq})`, (s) => s.insertSeq?.p50);
	row(`INSERT p99 ms (${seq})`, (s) => s.insertSeq?.p99);
	row(`SELECT by id p50 ms (${seq})`, (s) => s.selectSeq?.p50, 3);
	row(`SELECT by id p99 ms (${seq})`, (s) => s.selectSeq?.p99, 3);
	row(`INSERT p50 ms (${conc})`, (s) => s.insertConc?.p50);
	row(`INSERT p99 ms (${conc})`, (s) => s.insertConc?.p99);
	row(`SELECT by id p50 ms (${conc})`, (s) => s.selectConc?.p50, 3);
	row(`SELECT by id p99 ms (${conc})`, (s) => s.selectConc?.p99, 3);
	options.actors.forEach((target, i) => {
		const a = (s) => s.rss?.[i];
		row(`RSS KB per actor with an open database (${a(t)?.actors ?? "-"} / ${a(o)?.actors ?? "-"} actors)`, (s) => a(s)?.perActorKb, 1);
		row(`  SQLite worker threads in the host then`, (s) => a(s)?.workers, 0);
	});
	rows.push({ figure: "UNIQUE violation, as the action sees it", theirs: errorText(t.caught), ours: errorText(o.caught), ratio: "" });
	rows.push({ figure: "syntax error, as the client sees it", theirs: errorText(t.uncaught), ours: errorText(o.uncaught), ratio: "" });
	const header = { figure: "figure", theirs: SIDES[0].label, ours: SIDES[1].label, ratio: "ours / theirs" };
	const text = table(
		Object.values(header),
		rows.map((r) => Object.fromEntries(Object.entries(header).map(([key, title]) => [title, r[key]]))),
	);
	const notes = [];
	for (const spec of SIDES) for (const note of results[spec.side].notes) notes.push(`${spec.label}: ${note}`);
	for (const spec of SIDES) {
		const e = results[spec.side].caught?.error;
		if (e) notes.push(`${spec.label}: the action's metadata.error: ${e}`);
	}
	return [text, ...notes].join("\n");
}

/** Runs the SQLite comparison against `engine`. Returns `{text, results, failed}`. */
export async function runSqliteComparison({ engine, options = sqliteOptions(), log = console.log }) {
	const results = Object.fromEntries(SIDES.map((spec) => [spec.side, { notes: [] }]));
	for (const spec of SIDES) {
		try {
			await sidePhase({ engine, spec, options, out: results[spec.side], log });
		} catch (err) {
			results[spec.side].notes.push(`SQLite phase failed: ${err.message}`);
			log(`sqlite: ${spec.label} failed: ${err.stack ?? err.message}`);
		}
	}
	const failed = SIDES.some((spec) => results[spec.side].notes.some((n) => n.includes("failed:")));
	return { text: report(results, options), results, failed };
}
