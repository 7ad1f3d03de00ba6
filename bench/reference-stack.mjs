// The rivetkit 3.0 stack end to end, as the test harness runs it: engine
// 3.0 started by __test__/helpers/engine.mjs, the example app on rivetkit
// 3.0.0 (examples/rivetkit-app-3) started by __test__/helpers/app.mjs, and
// RivetKit's own client. On the official `@rivetkit/rivetkit-napi@3.0.0`
// by default (what proves the harness and the app), on this addon with
// NAPI=ours. Prints one JSON object of figures; never asserts a timing.
//
//   node bench/reference-stack.mjs            # reference napi 3.0.0
//   NAPI=ours node bench/reference-stack.mjs  # rivetkit-native
//
// What it does: the app's node shows in the pool (`GET /pools/{pool}/nodes`),
// the loaded `.node` files are read from /proc (Linux), then actions (one
// call, then ACTIONS sequential calls), a connection and its event, raw
// HTTP, a scheduled action that writes KV, sleep and wake with the state
// kept, SIGINT, and the engine's stop.

import { readFileSync } from "node:fs";
import { join } from "node:path";

import { appDirs, interrupt, startApp, waitForOutput } from "../__test__/helpers/app.mjs";
import { listEnvoys, startEngine, waitFor } from "../__test__/helpers/engine.mjs";

const napi = process.env.NAPI ?? "reference";
const ACTIONS = Number(process.env.ACTIONS ?? 50);
const { createClient } = await import(join(appDirs[3], "node_modules/rivetkit/dist/tsup/client/mod.js"));

const now = () => performance.now();
const ms = (since) => Math.round(now() - since);
const figures = { napi, node: process.versions.node };

let t = now();
const engine = await startEngine({ arch: "v3" });
figures.engine = { version: engine.version, readyMs: ms(t) };
const pool = "reference-stack";
let app;
try {
	t = now();
	app = startApp(
		"src/server.mjs",
		{ RIVET_ENDPOINT: engine.endpoint, RIVET_TOKEN: engine.token, RIVET_POOL: pool },
		{ rivetkit: "3", napi },
	);
	await waitFor(
		async () => {
			if (app.exited) throw new Error(`the app exited (${JSON.stringify(app.exited)}):\n${app.out}`);
			return (await listEnvoys(engine, pool).catch(() => [])).length > 0;
		},
		{ timeoutMs: 60_000, what: "the app's node in the pool" },
	);
	figures.appInPoolMs = ms(t);
	if (process.platform === "linux") {
		const maps = readFileSync(`/proc/${app.child.pid}/maps`, "utf8").split("\n");
		figures.addons = [...new Set(maps.map((l) => l.split(/\s+/)[5]).filter((f) => f?.endsWith(".node")))];
	}

	const client = createClient({ endpoint: engine.endpoint, token: engine.token, poolName: pool });
	const counter = client.counter.getOrCreate(["reference"]);
	t = now();
	figures.firstAction = { value: await counter.increment(5), ms: ms(t) };
	t = now();
	for (let i = 0; i < ACTIONS; i++) await counter.increment(1);
	figures.sequentialActions = { count: ACTIONS, meanMs: +((now() - t) / ACTIONS).toFixed(2) };
	figures.count = await counter.getCount();

	const room = client.chatRoom.getOrCreate(["lobby"]).connect();
	const event = new Promise((resolve) => room.on("newMessage", resolve));
	await room.sendMessage("ada", "hello");
	figures.event = (await event).text;
	await room.dispose();

	figures.rawHttp = await (await client.echo.getOrCreate(["e"]).fetch("/hello?x=1")).json();

	const reminders = client.reminders.getOrCreate(["me"]);
	await reminders.remindIn(500, "stand up");
	await waitFor(async () => (await reminders.getFired()).count >= 1, { timeoutMs: 20_000, what: "the reminder" });
	figures.reminders = await reminders.getFired();

	await counter.goToSleep();
	await waitForOutput(app, /counter reference going to sleep/);
	t = now();
	figures.afterWake = { count: await counter.getCount(), ms: ms(t) };

	t = now();
	figures.sigint = { ...(await interrupt(app)), ms: ms(t) };
} finally {
	if (app && !app.exited) app.child.kill("SIGKILL");
	t = now();
	await engine.stop();
	figures.engineStopMs = ms(t);
}
console.log(JSON.stringify(figures, null, 2));
