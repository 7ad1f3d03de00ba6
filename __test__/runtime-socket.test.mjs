// The actor runtime socket (`c.actorRuntimeSocket()`, experimental) end to
// end: the example's test/runtime-socket-server.mjs under both RivetKit
// versions (2.3.19 on engine 2.3, 3.0.0 on engine 3.0) on the real engine,
// driven with that version's official client, while this process plays the
// other local process that reads and writes the actor's SQLite database
// through the socket (helpers/runtime-socket.mjs encodes the frames).

import assert from "node:assert/strict";
import { existsSync, statSync } from "node:fs";
import { dirname, isAbsolute } from "node:path";
import { after, before, describe, test } from "node:test";

import { engineArchOf, startAppWithClient } from "./helpers/app.mjs";
import { startEngine, waitFor } from "./helpers/engine.mjs";
import { connectRuntimeSocket, frame } from "./helpers/runtime-socket.mjs";

for (const version of ["2", "3"])
	describe(`the actor runtime socket in a RivetKit ${version === "3" ? "3.0.0" : "2.3.19"} app`, () => {
		let engine;
		let client;
		let app;
		const sockets = [];

		/** Resolves once `re` appears in the app's output after `from`. */
		const line = (re, from = 0) =>
			waitFor(() => re.test(app.out.slice(from)) || app.exited, { timeoutMs: 60_000, what: String(re) }).then(() => {
				if (!re.test(app.out.slice(from))) throw new Error(`the app exited while waiting for ${re}:\n${app.out}`);
			});

		const connect = async (path) => {
			const socket = await connectRuntimeSocket(path);
			sockets.push(socket);
			return socket;
		};

		before(async () => {
			engine = await startEngine({ arch: engineArchOf(version) });
			({ app, client } = await startAppWithClient("test/runtime-socket-server.mjs", {
				rivetkit: version,
				engine,
				pool: "runtime-socket",
				env: { RIVET_RUN_SERVICES: "0" },
			}));
		});

		after(async () => {
			for (const s of sockets) s.close();
			await client?.dispose();
			if (app && !app.exited) {
				app.child.kill("SIGKILL");
				await app.exit;
			}
			await engine?.stop();
		});

		test("another process reads and writes the actor's database; the socket closes with the generation", async () => {
			const items = client.items.getOrCreate(["shared"]);
			const path = await items.socket();
			assert.ok(isAbsolute(path), path);
			assert.equal(statSync(path).mode & 0o777, 0o600, "the socket is the owner's only");
			assert.equal(statSync(dirname(path)).mode & 0o777, 0o700, "in a private directory");
			assert.equal(await items.socket(), path, "the same socket on a second call");

			const db = await connect(path);
			assert.deepEqual(await db.hello(), { ok: true, maxFrameBytes: 32 * 1024 * 1024 });

			// Statements outside any lease.
			const inserted = await db.call({
				kind: "query",
				sql: "INSERT INTO items (body) VALUES (?) RETURNING id, body",
				params: ["from outside"],
			});
			assert.equal(inserted.type, "QueryOk");
			assert.deepEqual(inserted.columns, ["id", "body"]);
			assert.deepEqual(inserted.rows, [[1, "from outside"]]);
			assert.equal(inserted.changes, 1);
			assert.equal(inserted.lastInsertRowId, 1);

			// A lease: begin, a statement inside it, commit.
			assert.equal((await db.call({ kind: "begin", key: "batch" })).type, "BeginOk");
			const leased = await db.call({
				kind: "query",
				lease: "batch",
				sql: "INSERT INTO items (body) VALUES (?)",
				params: ["leased"],
			});
			assert.equal(leased.type, "QueryOk");
			assert.equal((await db.call({ kind: "commit", key: "batch" })).type, "CommitOk");
			const again = await db.call({ kind: "query", lease: "batch", sql: "SELECT 1" });
			assert.equal(again.type, "InvalidLeaseKey", "a committed lease is over");

			// The actor sees what the other process wrote, and the other way round.
			assert.deepEqual(await items.list(), ["from outside", "leased"]);
			await items.add("from the actor");
			const rows = await db.call({ kind: "query", sql: "SELECT body FROM items ORDER BY id" });
			assert.deepEqual(rows.rows, [["from outside"], ["leased"], ["from the actor"]]);

			// SQLite's errors come back with SQLite's code.
			const failed = await db.call({ kind: "query", sql: "SELECT * FROM no_such_table" });
			assert.equal(failed.type, "SqlError");
			assert.equal(failed.code, 1);
			assert.match(failed.message, /no_such_table/);

			// A client that sends garbage is sent GoAway and disconnected; the
			// actor and the other connection keep serving.
			const rogue = await connect(path);
			assert.equal((await rogue.hello()).ok, true);
			rogue.write(frame(Buffer.from([1, 0, 0, 9])));
			assert.deepEqual(await rogue.next(), { goAway: "MalformedFrame" });
			assert.equal(await rogue.next(), null, "then closed");
			assert.deepEqual(await items.list(), ["from outside", "leased", "from the actor"]);
			assert.equal(
				(await db.call({ kind: "exec", script: "INSERT INTO items (body) VALUES ('after')" })).type,
				"ExecOk",
			);

			// The generation sleeps: the socket closes and its file is removed.
			const from = app.out.length;
			await items.goToSleep();
			await line(/items shared going to sleep/, from);
			await waitFor(() => !existsSync(path), { timeoutMs: 30_000, what: "the socket file to be removed" });
			assert.equal(await db.next(), null, "the connection ends with the generation");

			// The next generation has its own socket; the data stayed.
			assert.deepEqual(await items.list(), ["from outside", "leased", "from the actor", "after"]);
			const next = await items.socket();
			assert.notEqual(next, path);
			const db2 = await connect(next);
			assert.equal((await db2.hello()).ok, true);
			assert.deepEqual((await db2.call({ kind: "query", sql: "SELECT COUNT(*) AS n FROM items" })).rows, [[4]]);
		});

		test("without enableActorRuntimeSocket the actor is refused with actor_runtime_socket.not_enabled", async () => {
			const plain = client.plain.getOrCreate(["off"]);
			assert.equal(await plain.ping(), "pong");
			await assert.rejects(plain.socket(), (err) => {
				assert.equal(err.group, "actor_runtime_socket");
				assert.equal(err.code, "not_enabled");
				return true;
			});
			assert.equal(await plain.ping(), "pong", "the actor keeps serving");
		});

		test("the host's shutdown closes the sockets and removes their files", async () => {
			const items = client.items.getOrCreate(["until-shutdown"]);
			const path = await items.socket();
			const db = await connect(path);
			assert.equal((await db.hello()).ok, true);
			// RivetKit's own handler drains, then re-raises SIGINT.
			let killed = false;
			app.child.kill("SIGINT");
			const killer = setTimeout(() => {
				killed = true;
				app.child.kill("SIGKILL");
			}, 30_000);
			await app.exit;
			clearTimeout(killer);
			assert.equal(killed, false, `the host did not exit within 30 s of SIGINT:\n${app.out}`);
			assert.equal(existsSync(path), false, "the socket file is gone");
			assert.equal(await db.next(), null, "the connection ended");
		});
	});
