// Test fixture (not part of the example): actors that use RivetKit's
// queues (`c.queue`, `handle.send`) and cron jobs (`c.cron`), for
// __test__/queue.test.mjs and __test__/cron.test.mjs. Lives inside the
// example so that "rivetkit" resolves from the example's own node_modules.
//
//   node test/queues-cron-server.mjs

import { actor, queue, setup } from "rivetkit";

const name = (c) => c.key.join("/");

// `jobs` is consumed by the run loop, in order, and each message is
// answered (`complete`). `tasks` waits in the queue until `takeTasks`
// takes it. `locked` refuses every publisher. Small limits, and a short
// sleep timeout so that an idle worker (its loop waiting on the queue)
// goes to sleep during a test.
const worker = actor({
	state: { done: [], wakes: 0 },
	queues: {
		jobs: queue(),
		tasks: queue(),
		locked: queue({ canPublish: () => false }),
	},
	options: { sleepTimeout: 1_500, maxQueueSize: 4, maxQueueMessageSize: 512 },
	onWake: (c) => {
		c.state.wakes += 1;
		console.log(`worker ${name(c)} awake`);
	},
	onSleep: (c) => {
		console.log(`worker ${name(c)} going to sleep`);
	},
	run: async (c) => {
		for await (const message of c.queue.iter({ names: ["jobs"], completable: true })) {
			c.state.done.push(message.body);
			console.log(`worker ${name(c)} did ${JSON.stringify(message.body)}`);
			await message.complete({ did: message.body });
		}
	},
	actions: {
		done: (c) => c.state.done,
		wakes: (c) => c.state.wakes,
		takeTasks: async (c) => (await c.queue.nextBatch({ names: ["tasks"], count: 10, timeout: 0 })).map((m) => m.body),
		sendSelf: async (c, body) => {
			await c.queue.send("tasks", body);
		},
		goToSleep: (c) => {
			c.sleep();
		},
	},
});

// Cron jobs set through actions; `tick` records each fire (with the
// fire info RivetKit passes as the last argument) in the state.
const ticker = actor({
	state: { ticks: [] },
	options: { sleepTimeout: 2_000 },
	onWake: (c) => {
		console.log(`ticker ${name(c)} awake`);
	},
	onSleep: (c) => {
		console.log(`ticker ${name(c)} going to sleep`);
	},
	actions: {
		every: async (c, interval, maxHistory) => {
			await c.cron.every({ name: "tick", interval, action: "tick", args: ["every"], maxHistory });
		},
		set: async (c, expression, timezone) => {
			await c.cron.set({ name: "daily", expression, timezone, action: "tick", args: ["daily"] });
		},
		get: async (c, job) => (await c.cron.get(job)) ?? null,
		list: async (c) => await c.cron.list(),
		remove: async (c, job) => await c.cron.delete(job),
		history: async (c, job, limit) => await c.cron.history(job, limit === undefined ? undefined : { limit }),
		tick: (c, label, fire) => {
			c.state.ticks.push({ label, fire });
			console.log(`ticker ${name(c)} tick ${label}`);
		},
		ticks: (c) => c.state.ticks,
	},
});

setup({ use: { worker, ticker } }).start();
