// A counter: the smallest actor with persistent state. Its state is saved
// by RivetKit after each change and survives sleeping (the actor is
// unloaded from memory) and waking, and restarts of the app.

import { actor } from "rivetkit";

export const counter = actor({
	state: { count: 0 },
	actions: {
		increment: (c, amount = 1) => {
			c.state.count += amount;
			// Every connected client subscribed to `newCount` receives it.
			c.broadcast("newCount", c.state.count);
			return c.state.count;
		},
		getCount: (c) => c.state.count,
		// Asks RivetKit to put this actor to sleep now, rather than after
		// `sleepTimeout` without traffic; the next request wakes it.
		goToSleep: (c) => {
			c.sleep();
		},
	},
	// Logged so that the terminal shows when the actor is loaded and unloaded.
	onWake: (c) => {
		console.log(`counter ${c.key.join("/")} awake (count ${c.state.count})`);
	},
	onSleep: (c) => {
		console.log(`counter ${c.key.join("/")} going to sleep`);
	},
	options: {
		// Idle actors are unloaded after 30 s without requests or connections.
		sleepTimeout: 30_000,
		actionTimeout: 10_000,
	},
});
