// Test fixture (not part of the example): actors whose queue consumption
// must survive a SIGKILLed host, for __test__/queue-commit.test.mjs
// (docs/queues-cron.md, "Consumed with the state").
//
//   node test/queue-commit-server.mjs

import { actor, queue, setup } from "rivetkit";

const name = (c) => c.key.join("/");
const pause = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// `n` carries 1, 2, 3, ... from one producer (the `produce` action). The run loop adds each to
// its state after a short pause (a handler that awaits between the receive
// and its change); a number that is not the last one plus 1 is a loss, a
// duplicate or a message out of order, and is recorded in `gaps`.
const summer = actor({
	state: { last: 0, count: 0, sum: 0, gaps: [] },
	queues: { n: queue() },
	options: { sleepTimeout: 60_000 },
	onWake: (c) => {
		console.log(`summer ${name(c)} awake at ${c.state.last}`);
	},
	run: async (c) => {
		for await (const message of c.queue.iter({ names: ["n"] })) {
			const n = message.body;
			await pause(2);
			if (n !== c.state.last + 1) c.state.gaps.push([c.state.last, n]);
			c.state.last = n;
			c.state.count += 1;
			c.state.sum += n;
		}
	},
	actions: {
		progress: (c) => ({ last: c.state.last, count: c.state.count, sum: c.state.sum, gaps: c.state.gaps }),
		// The producer: sends `from` ..= `to` in order, one at a time.
		produce: async (c, from, to) => {
			for (let n = from; n <= to; n++) await c.queue.send("n", n);
		},
	},
});

// `p`: the body "die" ends the host process (SIGKILL) whenever it is
// handled; anything else is recorded. The loop starts once `arm` is called. After maxQueueDeliveries tries the
// poison message is a dead letter, `$dead:p`, which `deadLetters` reads.
/** Keys of the `poisoned` actors whose armed flag is saved. */
const armed = new Set();

const poisoned = actor({
	state: { done: [], armed: false },
	queues: { p: queue() },
	options: { sleepTimeout: 60_000 },
	onWake: (c) => {
		if (c.state.armed) armed.add(name(c));
		console.log(`poisoned ${name(c)} awake`);
	},
	run: async (c) => {
		// Receives only once armed (and the flag saved), so that the test
		// sends both messages first.
		while (!armed.has(name(c))) {
			if (c.abortSignal.aborted) return;
			await pause(20);
		}
		for await (const message of c.queue.iter({ names: ["p"] })) {
			if (message.body === "die") {
				console.log(`poisoned ${name(c)} handles the poison message`);
				process.kill(process.pid, "SIGKILL");
				await pause(60_000);
			}
			c.state.done.push(message.body);
		}
	},
	actions: {
		done: (c) => c.state.done,
		arm: async (c) => {
			c.state.armed = true;
			await c.saveState({ immediate: true });
			armed.add(name(c));
		},
		deadLetters: async (c) =>
			(await c.queue.nextBatch({ names: ["$dead:p"], count: 10, timeout: 0 })).map((m) => [m.name, m.body]),
	},
});

setup({ use: { summer, poisoned } }).start();
