// Reminders: `remindIn(ms, text)` schedules the `fire` action with
// `c.schedule.after`. The engine wakes the actor when it is due, even if it
// is asleep by then. A fired reminder is counted in the state (small, kept
// in memory while awake) and logged in the actor's KV store (`c.kv`), which
// is read on demand and may grow without slowing down every wake.

import { actor } from "rivetkit";

/** KV keys of the log sort in firing order: `fired/00000001`, ... */
const logKey = (n) => `fired/${String(n).padStart(8, "0")}`;

export const reminders = actor({
	state: { firedCount: 0 },
	actions: {
		remindIn: async (c, ms, text) => {
			const id = await c.schedule.after(ms, "fire", text);
			console.log(`reminders ${c.key.join("/")}: "${text}" scheduled in ${ms} ms (${id})`);
			return id;
		},
		// Called by the schedule; clients may call it too.
		fire: async (c, text) => {
			c.state.firedCount += 1;
			await c.kv.put(logKey(c.state.firedCount), text);
			await c.kv.put("last", text);
			console.log(`reminders ${c.key.join("/")}: fired "${text}"`);
		},
		getFired: async (c) => ({
			count: c.state.firedCount,
			last: await c.kv.get("last"),
			log: (await c.kv.list("fired/")).map(([, text]) => text),
		}),
		goToSleep: (c) => {
			c.sleep();
		},
	},
	onWake: (c) => {
		console.log(`reminders ${c.key.join("/")} awake`);
	},
	onSleep: (c) => {
		console.log(`reminders ${c.key.join("/")} going to sleep`);
	},
});
