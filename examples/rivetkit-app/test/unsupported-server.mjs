// Test fixture (not part of the example): the app's actors plus `jobs`,
// which uses a RivetKit feature its options do not enable (the actor
// runtime socket), gets a schedule error from `c.cron`, and has an action
// and a queue check that throw a plain Error (an internal error). Lives
// inside the example so that "rivetkit" resolves from the example's own
// node_modules, like the app's modules do.
//
//   node test/unsupported-server.mjs

import { actor, queue, setup } from "rivetkit";

import { registry as app } from "../src/registry.mjs";

const jobs = actor({
	state: { submitted: 0 },
	queues: {
		// Its publisher check throws: the queue send fails inside the actor.
		checked: queue({
			canPublish: () => {
				throw new Error("the publisher check crashed");
			},
		}),
	},
	actions: {
		crash: () => {
			throw new Error("the action crashed on purpose");
		},
		// `c.actorRuntimeSocket()` fails with `actor_runtime_socket.not_enabled`
		// (the option `enableActorRuntimeSocket` is not set).
		enqueue: async (c) => {
			await c.actorRuntimeSocket();
			c.state.submitted += 1;
		},
		// An interval under the minimum: `schedule.invalid_interval`.
		every: async (c) => {
			await c.cron.every({ name: "tick", interval: 1_000, action: "ping" });
		},
		ping: (c) => `pong (${c.state.submitted} submitted)`,
	},
});

setup({ use: { ...app.config.use, jobs } }).start();
