// A RivetKit app (for bench/start-failure.mjs) whose actor's onWake always
// throws a UserError; it prints one line per start attempt.
import { actor, setup, UserError } from "rivetkit";

const failing = actor({
	state: { n: 0 },
	onWake: (c) => {
		console.log(`START ${c.actorId} ${Date.now()}`);
		throw new UserError("Come back tomorrow", { code: "not_today" });
	},
	actions: { ping: () => 1 },
});
const registry = setup({ use: { failing }, noWelcome: true });
(await registry.startAndWait?.()) ?? registry.start();
console.log("READY");
