// Test fixture (not part of the example): actors with an embedded SQLite
// database (`c.db`), through RivetKit's raw `db()` and its drizzle driver,
// for __test__/sqlite.test.mjs. Lives inside the example so that "rivetkit"
// and "drizzle-orm" resolve from the example's own node_modules.
//
//   node test/sqlite-server.mjs
//
// Configured by the environment RivetKit reads (RIVET_ENDPOINT, RIVET_POOL,
// RIVET_TOKEN, RIVET_NAMESPACE). Logs "<actor> <key> awake" and "... going
// to sleep" so that the test can follow the lifecycle.

import { eq } from "drizzle-orm";
import { actor, setup } from "rivetkit";
import { db } from "rivetkit/db";
import { db as drizzle, integer, sqliteTable, text } from "rivetkit/db/drizzle";

const key = (c) => c.key.join("/");
const lifecycle = (name) => ({
	onWake: (c) => console.log(`${name} ${key(c)} awake`),
	onSleep: (c) => console.log(`${name} ${key(c)} going to sleep`),
});

/** A value as JSON can carry it, with its JavaScript type. */
function typed(value) {
	if (value === null) return { type: "null", value: null };
	if (typeof value === "bigint") return { type: "bigint", value: value.toString() };
	if (Array.isArray(value)) return { type: "array", value };
	if (value instanceof Uint8Array) return { type: "Uint8Array", value: [...value] };
	return { type: typeof value, value };
}

/** What an error caught inside the actor looks like. */
function caught(err) {
	return { group: err.group ?? null, code: err.code ?? null, message: err.message, metadata: err.metadata ?? null };
}

// Raw SQL, with a migration.
const notes = actor({
	db: db({
		onMigrate: async (db) => {
			await db.execute(`CREATE TABLE IF NOT EXISTS notes (
				id INTEGER PRIMARY KEY AUTOINCREMENT,
				body TEXT NOT NULL UNIQUE
			)`);
			await db.execute(`CREATE TABLE IF NOT EXISTS vals (
				id INTEGER PRIMARY KEY, i INTEGER, big INTEGER, r REAL, t TEXT, b BLOB, n
			)`);
		},
	}),
	actions: {
		add: async (c, body) => (await c.db.execute("INSERT INTO notes (body) VALUES (?) RETURNING id", body))[0].id,
		list: async (c) => (await c.db.execute("SELECT body FROM notes ORDER BY id")).map((r) => r.body),
		// Every SQLite type, bound and read back. A bound bigint becomes a
		// Number in RivetKit, so the integers beyond 2^53 go in as SQL.
		values: async (c) => {
			await c.db.execute("DELETE FROM vals");
			await c.db.execute(
				"INSERT INTO vals VALUES (1, ?, 9007199254740993, ?, ?, ?, ?)",
				-42,
				3.25,
				"héllo \u{1F600}",
				new Uint8Array([0, 255, 7]),
				null,
			);
			await c.db.execute(
				"INSERT INTO vals VALUES (2, ?, -9223372036854775808, ?, ?, ?, ?)",
				Number.MAX_SAFE_INTEGER,
				-1e-300,
				"",
				new Uint8Array([]),
				null,
			);
			await c.db.execute("INSERT INTO vals (id, big, r) VALUES (3, 9223372036854775807, 1e308)");
			const rows = await c.db.execute("SELECT * FROM vals ORDER BY id");
			const exact = await c.db.execute("SELECT big FROM vals WHERE id = 1");
			return {
				rows: rows.map((row) => Object.fromEntries(Object.entries(row).map(([k, v]) => [k, typed(v)]))),
				exact: exact[0].big === 9007199254740993n,
			};
		},
		// A transaction whose callback throws: rolled back, the error rethrown.
		failingTransaction: async (c, body) => {
			let error = null;
			try {
				await c.db.transaction(async (tx) => {
					await tx.execute("INSERT INTO notes (body) VALUES (?)", body);
					throw new Error("boom");
				});
			} catch (err) {
				error = err.message;
			}
			const found = await c.db.execute("SELECT COUNT(*) AS n FROM notes WHERE body = ?", body);
			return { error, found: found[0].n };
		},
		transfer: async (c, a, b) =>
			await c.db.transaction(async (tx) => {
				await tx.execute("INSERT INTO notes (body) VALUES (?)", a);
				await tx.execute("INSERT INTO notes (body) VALUES (?)", b);
				return "done";
			}),
		// Statements whose error reaches the client uncaught.
		run: async (c, sql, ...args) => await c.db.execute(sql, ...args),
		// The same error, as the action sees it.
		catchError: async (c, sql, ...args) => {
			try {
				await c.db.execute(sql, ...args);
				return null;
			} catch (err) {
				return caught(err);
			}
		},
		goToSleep: (c) => {
			c.sleep();
		},
	},
	...lifecycle("notes"),
	options: { sleepTimeout: 60_000, actionTimeout: 30_000 },
});

// Drizzle, with its schema.
const todoTable = sqliteTable("todos", {
	id: integer("id").primaryKey({ autoIncrement: true }),
	title: text("title").notNull(),
	done: integer("done", { mode: "boolean" }).notNull().default(false),
});

const todos = actor({
	db: drizzle({
		schema: { todos: todoTable },
		onMigrate: async (db) => {
			await db.execute(`CREATE TABLE IF NOT EXISTS todos (
				id INTEGER PRIMARY KEY AUTOINCREMENT,
				title TEXT NOT NULL,
				done INTEGER NOT NULL DEFAULT 0
			)`);
		},
	}),
	actions: {
		add: async (c, title) => (await c.db.insert(todoTable).values({ title }).returning())[0],
		finish: async (c, id) => {
			await c.db.update(todoTable).set({ done: true }).where(eq(todoTable.id, id));
		},
		list: async (c) => await c.db.select().from(todoTable).orderBy(todoTable.id),
		addMany: async (c, titles) =>
			await c.db.transaction(async (tx) => {
				for (const title of titles) await tx.insert(todoTable).values({ title });
				return titles.length;
			}),
		goToSleep: (c) => {
			c.sleep();
		},
	},
	...lifecycle("todos"),
	options: { sleepTimeout: 60_000, actionTimeout: 30_000 },
});

// Declares a database and never queries it.
const quiet = actor({
	db: db(),
	state: { pings: 0 },
	actions: {
		ping: (c) => {
			c.state.pings += 1;
			return c.state.pings;
		},
	},
	...lifecycle("quiet"),
	options: { sleepTimeout: 60_000 },
});

// State and SQL committed together: `db.transaction(fn, { experimental:
// { includeState: true } })` (ctx.beginStateTransaction).
const includeState = { experimental: { includeState: true } };
const ledger = actor({
	db: db({
		onMigrate: async (db) => {
			await db.execute("CREATE TABLE IF NOT EXISTS entries (id INTEGER PRIMARY KEY, amount INTEGER NOT NULL)");
		},
	}),
	state: { balance: 0 },
	actions: {
		deposit: async (c, amount) =>
			await c.db.transaction(async (tx) => {
				await tx.execute("INSERT INTO entries (amount) VALUES (?)", amount);
				c.state.balance += amount;
				return c.state.balance;
			}, includeState),
		// Throws after its insert and its state change: neither stays.
		failingDeposit: async (c, amount) =>
			await c.db.transaction(async (tx) => {
				await tx.execute("INSERT INTO entries (amount) VALUES (?)", amount);
				c.state.balance += amount;
				throw new Error("declined");
			}, includeState),
		read: async (c) => {
			const rows = await c.db.execute("SELECT COUNT(*) AS n, COALESCE(SUM(amount), 0) AS total FROM entries");
			return { balance: c.state.balance, entries: Number(rows[0].n), total: Number(rows[0].total) };
		},
	},
	...lifecycle("ledger"),
	options: { sleepTimeout: 60_000, actionTimeout: 30_000 },
});

export const registry = setup({ use: { notes, todos, quiet, ledger } });

registry.start();
