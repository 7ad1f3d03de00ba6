// Test fixture (not part of the example): an actor whose `run` is a
// RivetKit workflow (`rivetkit/workflow`), for __test__/workflow.test.mjs.
// Lives inside the example so that "rivetkit" resolves from the example's
// own node_modules.
//
//   node test/workflow-server.mjs
//
// The workflow: step "one" (+1), a sleep, step "two" (+10), a wait for a
// message on queue `go`, step "three" (+100, keeps the message). Each step
// counts its runs in the state and logs "flow <key> step <name>" so that
// the test can count runs across restarts of the host.

import { actor, queue, setup } from "rivetkit";
import { workflow } from "rivetkit/workflow";

const name = (c) => c.key.join("/");

const flow = actor({
	state: { count: 0, runs: { one: 0, two: 0, three: 0 }, message: null, finished: false },
	queues: { go: queue() },
	options: { sleepTimeout: 2_000 },
	onWake: (c) => console.log(`flow ${name(c)} awake`),
	onSleep: (c) => console.log(`flow ${name(c)} going to sleep`),
	run: workflow(async (ctx) => {
		const step = (label, add, extra) =>
			ctx.step(label, async (s) => {
				s.state.count += add;
				s.state.runs[label] += 1;
				extra?.(s);
				console.log(`flow ${name(s)} step ${label}`);
			});
		await step("one", 1);
		await ctx.sleep("nap", 500);
		await step("two", 10);
		const message = await ctx.queue.next("wait-go", { names: ["go"] });
		await step("three", 100, (s) => {
			s.state.message = message.body;
			s.state.finished = true;
		});
	}),
	actions: {
		status: (c) => c.state,
	},
});

setup({ use: { flow } }).start();
