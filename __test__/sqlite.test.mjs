// The actor's SQLite database (`ctx.sql()`, RivetKit's `c.db`) end to end,
// stored on the real engine's page store.
//
// 1. The addon's own API in this process (jobs run in the actor's
//    onRequest, as in kv.test.mjs): values at the boundary, argument
//    errors, transactions, and the fence of a handle kept past its
//    generation.
// 2. A RivetKit app (test/sqlite-server.mjs of the example, `db({
//    onMigrate })` and the drizzle driver) in a child process, under
//    rivetkit 3.0.0 on engine 3.0 and under rivetkit 2.3.19 on engine
//    2.3, driven with that version's official client: migrations, raw SQL and drizzle, every value
//    type, rollback, SQL errors as the client sees them, and data that
//    survives sleep and wake, a graceful restart and a SIGKILL of the host.

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { readdirSync, readFileSync } from "node:fs";
import { after, before, describe, test } from "node:test";

import { actorJobs, json, native, serveActors } from "./helpers/actors.mjs";
import { appDirFor, engineArchOf, engineClient } from "./helpers/app.mjs";
import { createActor, sleepActor, startEngine, upsertRunnerConfig, waitFor } from "./helpers/engine.mjs";

const rejectsWith = (promise, code) =>
	assert.rejects(promise, (err) => {
		assert.equal(err.code, code, err.message);
		return true;
	});

/** Names of the threads of process `pid` (Linux). */
function threadNames(pid) {
	const dir = `/proc/${pid}/task`;
	return readdirSync(dir).map((tid) => {
		try {
			return readFileSync(`${dir}/${tid}/comm`, "utf8").trim();
		} catch {
			return "";
		}
	});
}
const sqliteWorkers = (pid) => threadNames(pid).filter((n) => n.startsWith("sqlite-worker")).length;

describe("ctx.sql() on the real engine", () => {
	let engine;
	let host;
	const jobs = actorJobs();
	/** Databases kept past their generation, by actor id. */
	const kept = new Map();
	const slept = new Set();

	before(async () => {
		engine = await startEngine({ arch: "v3" });
		const factory = new native.NapiActorFactory(
			{
				createState: async () => json({}),
				onSleep: async (_err, { ctx }) => {
					kept.set(ctx.actorId(), ctx.sql());
					slept.add(`${ctx.actorId()}:${ctx.generation()}`);
				},
				onRequest: async (_err, { ctx, request }) => {
					const job = jobs.job(request.uri.split("?")[0]);
					if (!job) return { status: 404 };
					await job(ctx);
					return { status: 200 };
				},
			},
			{ onRequestTimeoutMs: 120_000 },
		);
		host = await serveActors(engine, { sql: factory });
	});

	after(async () => {
		await host?.stop();
		await engine?.stop();
	});

	const create = async (key) => (await createActor(engine.endpoint, { name: "sql", key, pool: host.pool })).actor_id;
	const inActor = (actorId, fn) => jobs.inActor(engine.endpoint, actorId, fn);

	test("values cross both ways; integers beyond 2^53 come back as bigint", async () => {
		const id = await create("values");
		const out = await inActor(id, async (ctx) => {
			const db = ctx.sql();
			await db.exec("CREATE TABLE v (i INTEGER, r REAL, t TEXT, b BLOB, n)");
			const inserted = await db.execute("INSERT INTO v VALUES (?, ?, ?, ?, ?)", [
				{ kind: "int", intValue: 9007199254740993n },
				{ kind: "float", floatValue: 0.1 },
				{ kind: "text", textValue: "ü\u0000z" },
				{ kind: "blob", blobValue: Buffer.from([1, 2, 250]) },
				{ kind: "null" },
			]);
			await db.run("INSERT INTO v VALUES (?, ?, ?, ?, ?)", [
				{ kind: "int", intValue: -5 },
				{ kind: "float", floatValue: -2.5 },
				{ kind: "text", textValue: "" },
				{ kind: "blob", blobValue: Buffer.from([0]) },
				{ kind: "null" },
			]);
			const query = await db.query("SELECT * FROM v ORDER BY rowid");
			const min = await db.execute("SELECT -9223372036854775808 AS m, 9007199254740991 AS s");
			return { inserted, query, min };
		});
		assert.equal(out.inserted.changes, 1);
		assert.equal(out.inserted.lastInsertRowId, 1);
		assert.deepEqual(out.query.columns, ["i", "r", "t", "b", "n"]);
		assert.deepEqual(out.query.rows, [
			[9007199254740993n, 0.1, "ü\u0000z", [1, 2, 250], null],
			[-5, -2.5, "", [0], null],
		]);
		assert.deepEqual(out.min.rows, [[-9223372036854775808n, 9007199254740991]]);
	});

	test("malformed arguments reject with napi.invalid_argument", async () => {
		const id = await create("arguments");
		await inActor(id, async (ctx) => {
			const db = ctx.sql();
			await rejectsWith(db.execute(42), "napi.invalid_argument");
			await rejectsWith(db.execute("SELECT ?", [{ kind: "int", intValue: 1.5 }]), "napi.invalid_argument");
			await rejectsWith(db.execute("SELECT ?", [{ kind: "int", intValue: 2 ** 64 }]), "napi.invalid_argument");
			await rejectsWith(db.execute("SELECT ?", [{ kind: "date" }]), "napi.invalid_argument");
			await rejectsWith(db.execute("SELECT ?", [{ kind: "text" }]), "napi.invalid_argument");
			await rejectsWith(db.execute("SELECT ?", "nope"), "napi.invalid_argument");
			await rejectsWith(db.executeBatch([{ params: [] }]), "napi.invalid_argument");
			await rejectsWith(db.beginTransaction(0), "napi.invalid_argument");
			await rejectsWith(db.beginTransaction(Number.NaN), "napi.invalid_argument");
		});
	});

	test("an unused database costs no worker thread; an open one costs one", async () => {
		const id = await create("threads");
		const before = sqliteWorkers(process.pid);
		await inActor(id, async (ctx) => {
			assert.equal(ctx.sql().metrics(), null);
			assert.equal(ctx.sql().takeLastKvError(), null);
		});
		assert.equal(sqliteWorkers(process.pid), before);
		await inActor(id, async (ctx) => {
			await ctx.sql().exec("SELECT 1");
			assert.equal(typeof ctx.sql().metrics().commitCount, "number");
		});
		assert.equal(sqliteWorkers(process.pid), before + 1);
	});

	test("transactions: batches are all or nothing, statements outside wait, a timeout rolls back", async () => {
		const id = await create("transactions");
		const out = await inActor(id, async (ctx) => {
			const db = ctx.sql();
			await db.exec("CREATE TABLE t (x INTEGER PRIMARY KEY)");
			const batch = await db.executeBatch([
				{ sql: "INSERT INTO t VALUES (?)", params: [{ kind: "int", intValue: 1 }] },
				{ sql: "INSERT INTO t VALUES (2)" },
			]);
			const failed = await db
				.executeBatch([{ sql: "INSERT INTO t VALUES (3)" }, { sql: "INSERT INTO t VALUES (1)" }])
				.then(
					() => null,
					(e) => e.code,
				);

			const tx = await db.beginTransaction(60_000, "two inserts");
			await tx.execute("INSERT INTO t VALUES (10)");
			let outsideDone = false;
			const outside = db.execute("INSERT INTO t VALUES (20)").then(() => (outsideDone = true));
			await tx.exec("INSERT INTO t VALUES (11); INSERT INTO t VALUES (12)");
			const waited = !outsideDone;
			await tx.rollback();
			await outside;

			const short = await db.beginTransaction(50);
			await short.execute("INSERT INTO t VALUES (30)");
			await new Promise((r) => setTimeout(r, 200));
			const expired = await short.commit().then(
				() => null,
				(e) => e.code,
			);
			const rows = await db.query("SELECT x FROM t ORDER BY x");
			return { changes: batch.map((r) => r.changes), failed, waited, expired, rows: rows.rows.flat() };
		});
		assert.deepEqual(out, {
			changes: [1, 1],
			failed: "core.internal_error",
			waited: true,
			expired: "sqlite.transaction_expired",
			rows: [1, 2, 20],
		});
	});

	test("a database kept past its generation refuses every statement; its data is the next generation's", async () => {
		const id = await create("stale");
		await inActor(id, async (ctx) => {
			await ctx.sql().exec("CREATE TABLE t (x TEXT); INSERT INTO t VALUES ('one')");
		});
		await sleepActor(engine.endpoint, id);
		await waitFor(() => slept.has(`${id}:${engine.firstGeneration}`) && kept.has(id), { what: "onSleep" });
		assert.equal(await inActor(id, async (ctx) => ctx.generation()), engine.firstGeneration + 1);
		const stale = kept.get(id);
		await rejectsWith(stale.execute("INSERT INTO t VALUES ('stale')"), "actor.stopping");
		await rejectsWith(stale.exec("SELECT 1"), "actor.stopping");
		await rejectsWith(stale.beginTransaction(), "actor.stopping");
		const rows = await inActor(id, async (ctx) => (await ctx.sql().query("SELECT x FROM t")).rows);
		assert.deepEqual(rows, [["one"]]);
	});

	test("close() is final for the generation", async () => {
		const id = await create("close");
		const code = await inActor(id, async (ctx) => {
			await ctx.sql().exec("CREATE TABLE t (x)");
			await ctx.sql().close();
			return ctx
				.sql()
				.exec("SELECT 1")
				.then(
					() => null,
					(e) => e.code,
				);
		});
		assert.equal(code, "sqlite.closed");
	});
});

// --- a RivetKit 2.3.19 app -------------------------------------------------

const START_TIMEOUT_MS = 60_000;

for (const version of ["3", "2"])
	describe(`c.db in a RivetKit ${version === "3" ? "3.0.0" : "2.3.19"} app with the official client`, () => {
		let engine;
		let pool;
		let client;
		let app;
		const apps = [];

		/** Starts the fixture app on `appPool`; resolves once its envoy serves. */
		async function startApp(appPool = pool) {
			const child = spawn(process.execPath, ["test/sqlite-server.mjs"], {
				cwd: appDirFor({ rivetkit: version }),
				env: {
					...process.env,
					RIVET_ENDPOINT: engine.endpoint,
					RIVET_NAMESPACE: engine.namespace,
					RIVET_TOKEN: engine.token,
					RIVET_POOL: appPool,
					RIVET_RUN_SERVICES: "0",
					RIVET_LOG_LEVEL: "info",
				},
				stdio: ["ignore", "pipe", "pipe"],
			});
			const started = { child, out: "", exited: null };
			child.stdout.on("data", (d) => (started.out += d));
			child.stderr.on("data", (d) => (started.out += d));
			started.exit = once(child, "exit").then(([code, signal]) => (started.exited = { code, signal }));
			apps.push(started);
			await waitFor(() => started.exited || /registry serving/.test(started.out), {
				timeoutMs: START_TIMEOUT_MS,
				what: "the app to serve",
			});
			if (started.exited) throw new Error(`the app exited before serving:\n${started.out}`);
			return started;
		}

		/** Resolves once `re` appears in `app`'s output after `from`. */
		const line = (re, from = 0) =>
			waitFor(() => re.test(app.out.slice(from)) || app.exited, { timeoutMs: 60_000, what: String(re) }).then(() => {
				if (!re.test(app.out.slice(from))) throw new Error(`the app exited while waiting for ${re}:\n${app.out}`);
			});

		/** Calls `fn` until the actor answers (it moves to a restarted host). */
		const untilServed = (fn) =>
			waitFor(
				async () => {
					try {
						return { value: await fn() };
					} catch {
						return undefined;
					}
				},
				{ timeoutMs: 90_000, intervalMs: 500, what: "the actor to answer on the new host" },
			).then((r) => r.value);

		before(async () => {
			engine = await startEngine({ arch: engineArchOf(version) });
			pool = `sqlite-app-${process.pid}`;
			await upsertRunnerConfig(engine.endpoint, pool);
			app = await startApp();
			client = await engineClient(version, engine, pool);
		});

		after(async () => {
			await client?.dispose();
			for (const a of apps) if (!a.exited) a.child.kill("SIGKILL");
			await engine?.stop();
		});

		test("an actor that declares a database and never queries it starts, serves, and opens nothing", async () => {
			const quiet = client.quiet.getOrCreate(["never-queries"]);
			assert.equal(await quiet.ping(), 1);
			assert.equal(await quiet.ping(), 2);
			assert.equal(sqliteWorkers(app.child.pid), 0, "no SQLite worker thread in the host");
		});

		test("db({ onMigrate }) migrates on start; raw SQL works", async () => {
			const notes = client.notes.getOrCreate(["raw"]);
			assert.equal(await notes.add("first"), 1);
			assert.equal(await notes.add("second"), 2);
			assert.deepEqual(await notes.list(), ["first", "second"]);
		});

		test("every value type round-trips", async () => {
			const notes = client.notes.getOrCreate(["values"]);
			const { rows, exact } = await notes.values();
			assert.equal(exact, true, "an integer beyond 2^53 comes back exactly, as a bigint");
			const v = (type, value) => ({ type, value });
			assert.deepEqual(rows, [
				{
					id: v("number", 1),
					i: v("number", -42),
					big: v("bigint", "9007199254740993"),
					r: v("number", 3.25),
					t: v("string", "héllo \u{1F600}"),
					b: v("array", [0, 255, 7]),
					n: v("null", null),
				},
				{
					id: v("number", 2),
					i: v("number", Number.MAX_SAFE_INTEGER),
					big: v("bigint", "-9223372036854775808"),
					r: v("number", -1e-300),
					t: v("string", ""),
					// A zero-length blob reads back as null: the page store
					// client's reader does so (the reference addon too).
					b: v("null", null),
					n: v("null", null),
				},
				{
					id: v("number", 3),
					i: v("null", null),
					big: v("bigint", "9223372036854775807"),
					r: v("number", 1e308),
					t: v("null", null),
					b: v("null", null),
					n: v("null", null),
				},
			]);
		});

		test("a transaction that throws rolls back; one that returns commits", async () => {
			const notes = client.notes.getOrCreate(["transactions"]);
			assert.deepEqual(await notes.failingTransaction("never"), { error: "boom", found: 0 });
			assert.equal(await notes.transfer("a", "b"), "done");
			// A failing statement inside the transaction takes the first insert with it.
			await assert.rejects(notes.transfer("c", "a"));
			assert.deepEqual(await notes.list(), ["a", "b"]);
		});

		test("a transaction with includeState commits its statements and the state together, or neither", async () => {
			const ledger = client.ledger.getOrCreate(["state-tx"]);
			assert.equal(await ledger.deposit(5), 5);
			assert.equal(await ledger.deposit(7), 12);
			// A plain Error reaches the client as RivetKit hides it (internal_error).
			await assert.rejects(ledger.failingDeposit(100));
			assert.deepEqual(await ledger.read(), { balance: 12, entries: 2, total: 12 });
		});

		test("SQL errors reach the action and the client as the reference reports them", async () => {
			const notes = client.notes.getOrCreate(["errors"]);
			await notes.add("taken");
			const duplicate = await notes.catchError("INSERT INTO notes (body) VALUES (?)", "taken");
			assert.equal(`${duplicate.group}.${duplicate.code}`, "core.internal_error");
			assert.match(duplicate.metadata.error, /UNIQUE constraint failed: notes\.body/);
			const syntax = await notes.catchError("SELEKT 1");
			assert.equal(`${syntax.group}.${syntax.code}`, "core.internal_error");
			assert.match(syntax.metadata.error, /near "SELEKT": syntax error/);
			// Named: the statement and the actor, in front of SQLite's message.
			assert.match(syntax.metadata.error, /SQLite statement `SELEKT 1` of actor \w+ \(key errors, generation \d+\)/);
			for (const args of [["INSERT INTO notes (body) VALUES (?)", "taken"], ["SELEKT 1"]]) {
				await assert.rejects(notes.run(...args), (err) => {
					assert.equal(err.group, "core");
					assert.equal(err.code, "internal_error");
					return true;
				});
			}
			assert.deepEqual(await notes.list(), ["taken"], "the actor keeps serving");
		});

		test("drizzle: schema queries, updates and a transaction", async () => {
			const todos = client.todos.getOrCreate(["drizzle"]);
			assert.deepEqual(await todos.add("write tests"), { id: 1, title: "write tests", done: false });
			assert.equal(await todos.addMany(["ship", "rest"]), 2);
			await todos.finish(1);
			assert.deepEqual(await todos.list(), [
				{ id: 1, title: "write tests", done: true },
				{ id: 2, title: "ship", done: false },
				{ id: 3, title: "rest", done: false },
			]);
		});

		test("data survives sleep and wake", async () => {
			const notes = client.notes.getOrCreate(["sleepy"]);
			await notes.add("before sleep");
			const from = app.out.length;
			await notes.goToSleep();
			await line(/notes sleepy going to sleep/, from);
			assert.deepEqual(await notes.list(), ["before sleep"]);
			await line(/notes sleepy awake/, from);
			const todos = client.todos.getOrCreate(["sleepy-todos"]);
			await todos.add("persist");
			await todos.goToSleep();
			await line(/todos sleepy-todos going to sleep/, from);
			assert.deepEqual(await todos.list(), [{ id: 1, title: "persist", done: false }]);
		});

		// The last two tests restart the host. After a pool's host restarted,
		// engine 2.3.19 is slow to place *new* actors in that pool (see
		// rivetkit-app.test.mjs), so from here on only actors that exist are used.

		test("a committed transaction survives a SIGKILL of the host", async () => {
			const notes = client.notes.getOrCreate(["killed"]);
			assert.equal(await notes.transfer("acked 1", "acked 2"), "done");
			await notes.add("acked 3");
			const todos = client.todos.getOrCreate(["killed-todos"]);
			assert.equal(await todos.addMany(["acked"]), 1);
			const ledger = client.ledger.getOrCreate(["killed-ledger"]);
			assert.equal(await ledger.deposit(3), 3);
			assert.equal(await ledger.deposit(4), 7);
			app.child.kill("SIGKILL");
			await app.exit;
			app = await startApp();
			assert.deepEqual(await untilServed(() => notes.list()), ["acked 1", "acked 2", "acked 3"]);
			assert.deepEqual(await untilServed(() => todos.list()), [{ id: 1, title: "acked", done: false }]);
			assert.deepEqual(await untilServed(() => ledger.read()), { balance: 7, entries: 2, total: 7 });
		});

		test("data survives a graceful restart of the host", async () => {
			// The actor of the first test, on the host started by the last one.
			const notes = client.notes.getOrCreate(["raw"]);
			await untilServed(() => notes.add("kept across restart"));
			app.child.kill("SIGINT");
			await app.exit;
			assert.match(app.out, /notes raw going to sleep/, "RivetKit drained the actor");
			app = await startApp();
			assert.deepEqual(await untilServed(() => notes.list()), ["first", "second", "kept across restart"]);
		});
	});
