// Test fixture (not part of the example): actors with something to show
// in the inspector, for __test__/inspector.test.mjs. Lives inside the
// example so that "rivetkit" resolves from the example's own node_modules.
//
//   node test/inspector-server.mjs
//
// `desk` has a state, connection params and state, a queue nobody reads, a
// scheduled event and a cron job; `notebook` has a database; `flow`'s `run`
// is a workflow (one step, then it waits for a message that never comes).
// Configured by the environment RivetKit reads (RIVET_ENDPOINT, RIVET_POOL,
// RIVET_TOKEN, RIVET_NAMESPACE).

import { actor, queue, setup } from "rivetkit";
import { db } from "rivetkit/db";
import { workflow } from "rivetkit/workflow";

const desk = actor({
	state: { count: 0 },
	createConnState: (_c, params) => ({ joined: params?.name ?? null }),
	queues: { jobs: queue(), mail: queue() },
	actions: {
		increment: (c, amount = 1) => {
			c.state.count += amount;
			return c.state.count;
		},
		enqueue: async (c, name, body) => {
			await c.queue.send(name, body);
		},
		remindLater: async (c) => await c.schedule.after(3_600_000, "increment", 1),
		tickEveryMinute: async (c) => {
			await c.cron.every({ name: "tick", interval: 60_000, action: "increment", args: [1] });
		},
	},
	options: { sleepTimeout: 60_000 },
});

const notebook = actor({
	db: db({
		onMigrate: async (db) => {
			await db.execute(`CREATE TABLE IF NOT EXISTS notes (
				id INTEGER PRIMARY KEY AUTOINCREMENT,
				body TEXT NOT NULL
			)`);
		},
	}),
	actions: {
		addNote: async (c, body) => {
			await c.db.execute("INSERT INTO notes (body) VALUES (?)", body);
		},
	},
	options: { sleepTimeout: 60_000 },
});

const flow = actor({
	state: { steps: 0 },
	queues: { go: queue() },
	run: workflow(async (ctx) => {
		await ctx.step("first", async (s) => {
			s.state.steps += 1;
		});
		await ctx.queue.next("wait-go", { names: ["go"] });
	}),
	actions: {
		steps: (c) => c.state.steps,
	},
	options: { sleepTimeout: 60_000 },
});

setup({ use: { desk, notebook, flow } }).start();
