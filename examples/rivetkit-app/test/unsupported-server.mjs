// Test fixture (not part of the example): the app's actors plus `jobs`,
// which uses a RivetKit feature that rivetkit-native has not built yet
// (queues, cron). Lives inside the example so that "rivetkit" resolves from the
// example's own node_modules, like the app's modules do.
//
//   node test/unsupported-server.mjs

import { actor, setup } from "rivetkit";

import { registry as app } from "../src/registry.mjs";

const jobs = actor({
	state: { submitted: 0 },
	actions: {
		// `c.queue.send` fails with `rivetkit-native.unsupported`.
		enqueue: async (c, job) => {
			await c.queue.send("jobs", job);
			c.state.submitted += 1;
		},
		// `c.cron.every` fails with `rivetkit-native.unsupported` too.
		every: async (c) => {
			await c.cron.every({ name: "tick", interval: 60_000, action: "ping" });
		},
		ping: (c) => `pong (${c.state.submitted} submitted)`,
	},
});

setup({ use: { ...app.config.use, jobs } }).start();
