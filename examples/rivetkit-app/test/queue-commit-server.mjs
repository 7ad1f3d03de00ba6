// Test fixture (not part of the example): actors whose queue consumption
// must survive a SIGKILLed host, for __test__/queue-commit.test.mjs
// (docs/queues-cron.md, "Consumed with the state").
//
//   node test/queue-commit-server.mjs

import { actor, queue, setup } from "rivetkit";

const name = (c) => c.key.join("/");
const pause = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// `n` carries 1, 2, 3, ... from one producer: the test, sending one at a
// time with the client's `send`, or the `produce` action. The run loop adds
// each to its state after a short pause (a handler that awaits between the
// receive and its change); a number that is not the last one plus 1 is a
// loss, a duplicate or a message out of order, and is recorded in `gaps`.
// A body `{n, again: true}` is the producer sending `n` again after a send
// that failed without an answer (the host died under it): it may have been
// queued before the failure, so a number already taken is skipped (counted
// in `resent`) when, and only when, it comes as such a resend.
const summer = actor({
	state: { last: 0, count: 0, sum: 0, gaps: [], resent: 0 },
	queues: { n: queue() },
	options: { sleepTimeout: 60_000 },
	onWake: (c) => {
		console.log(`summer ${name(c)} awake at ${c.state.last}`);
	},
	run: async (c) => {
		for await (const message of c.queue.iter({ names: ["n"] })) {
			const { n, again } = typeof message.body === "number" ? { n: message.body } : message.body;
			await pause(2);
			if (again && n <= c.state.last) {
				c.state.resent += 1;
				continue;
			}
			if (n !== c.state.last + 1) c.state.gaps.push([c.state.last, n]);
			c.state.last = n;
			c.state.count += 1;
			c.state.sum += n;
		}
	},
	actions: {
		progress: (c) => ({ last: c.state.last, count: c.state.count, sum: c.state.sum, gaps: c.state.gaps }),
		resent: (c) => c.state.resent,
		// The producer: sends `from` ..= `to` in order, one at a time.
		produce: async (c, from, to) => {
			for (let n = from; n <= to; n++) await c.queue.send("n", n);
		},
	},
});

// `q`: a completable queue whose sender waits (`wait: true`). The handler
// records the host's pid in the state, completes the message with it, and
// then, unless the host runs with ASKER_CALM=1, SIGKILLs the host at once.
// If the completion reached the sender, the save that consumed the message
// was confirmed first, so the message is never handled again; if the
// message is handled again, its first completion never reached anyone.
const asker = actor({
	state: { handledBy: [] },
	queues: { q: queue() },
	options: { sleepTimeout: 60_000 },
	run: async (c) => {
		for await (const message of c.queue.iter({ names: ["q"], completable: true })) {
			c.state.handledBy.push(process.pid);
			message.complete({ pid: process.pid, body: message.body });
			if (process.env.ASKER_CALM !== "1") {
				console.log(`asker ${name(c)} completed and dies`);
				process.kill(process.pid, "SIGKILL");
				await pause(60_000);
			}
		}
	},
	actions: {
		handledBy: (c) => c.state.handledBy,
		pid: () => process.pid,
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

setup({ use: { summer, poisoned, asker } }).start();
