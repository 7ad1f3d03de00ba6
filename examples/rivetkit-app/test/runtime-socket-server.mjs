// Test fixture (not part of the example): an actor with the runtime socket
// enabled (`options.enableActorRuntimeSocket`) and one without, both with
// an embedded SQLite database, for __test__/runtime-socket.test.mjs. Lives
// inside the example so that "rivetkit" resolves from the example's own
// node_modules.
//
//   node test/runtime-socket-server.mjs
//
// Configured by the environment RivetKit reads (RIVET_ENDPOINT, RIVET_POOL,
// RIVET_TOKEN, RIVET_NAMESPACE). Logs "<actor> <key> awake" and "... going
// to sleep" so that the test can follow the lifecycle.

import { actor, setup } from "rivetkit";
import { db } from "rivetkit/db";

const key = (c) => c.key.join("/");
const lifecycle = (name) => ({
	onWake: (c) => console.log(`${name} ${key(c)} awake`),
	onSleep: (c) => console.log(`${name} ${key(c)} going to sleep`),
});

// The socket is enabled: another process reads and writes `items`.
const items = actor({
	db: db({
		onMigrate: async (db) => {
			await db.execute(`CREATE TABLE IF NOT EXISTS items (
				id INTEGER PRIMARY KEY AUTOINCREMENT,
				body TEXT NOT NULL
			)`);
		},
	}),
	actions: {
		socket: async (c) => (await c.actorRuntimeSocket()).path,
		add: async (c, body) => {
			await c.db.execute("INSERT INTO items (body) VALUES (?)", body);
		},
		list: async (c) => (await c.db.execute("SELECT body FROM items ORDER BY id")).map((r) => r.body),
		goToSleep: (c) => {
			c.sleep();
		},
	},
	...lifecycle("items"),
	options: { enableActorRuntimeSocket: true, sleepTimeout: 60_000, actionTimeout: 30_000 },
});

// The same without the option: `c.actorRuntimeSocket()` is refused.
const plain = actor({
	db: db(),
	actions: {
		socket: async (c) => (await c.actorRuntimeSocket()).path,
		ping: () => "pong",
	},
	...lifecycle("plain"),
	options: { sleepTimeout: 60_000 },
});

export const registry = setup({ use: { items, plain } });

registry.start();
