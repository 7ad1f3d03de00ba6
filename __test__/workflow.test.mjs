// Workflows end to end, under both RivetKit versions: the app on this addon
// (test/workflow-server.mjs of the example, actor `flow`; rivetkit 2.3.19 on
// engine 2.3, rivetkit 3.0.0 on engine 3.0) driven by that version's
// official client. The workflow runs a step, sleeps,
// runs a second step, waits for a queue message and runs a third step. Its
// rows live in the actor's SQLite database and its flushes go through
// `saveStateAndWorkflowBatch` (docs/workflows.md).
//
// Then a SIGKILL of the host mid-workflow: completed steps do not run
// again, each step's effect on the state is there exactly once, and the
// workflow finishes after the restart.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { engineArchOf, engineClient, interrupt, startApp, waitForOutput } from "./helpers/app.mjs";
import { startEngine, waitFor } from "./helpers/engine.mjs";

const POOL = "workflows";

const count = (text, re) => (text.match(new RegExp(re, "g")) ?? []).length;

for (const version of ["2", "3"])
	describe(`workflows on a RivetKit ${version === "3" ? "3.0.0" : "2.3.19"} app`, () => {
		let engine;
		let client;
		const apps = [];
		const start = async () => {
			const app = startApp(
				"test/workflow-server.mjs",
				{
					RIVET_ENDPOINT: engine.endpoint,
					RIVET_TOKEN: engine.token,
					RIVET_POOL: POOL,
				},
				{ rivetkit: version },
			);
			apps.push(app);
			await waitForOutput(app, /registry serving/);
			return app;
		};
		const allOutput = () => apps.map((a) => a.out).join("\n");

		before(async () => {
			engine = await startEngine({ arch: engineArchOf(version) });
			client = await engineClient(version, engine, POOL);
		});

		after(async () => {
			for (const app of apps) if (!app.exited) await interrupt(app);
			await engine?.stop();
		});

		test("a workflow with a sleep and a queue wait completes", async () => {
			const app = await start();
			const flow = client.flow.getOrCreate(["plain"]);
			await flow.status();
			await waitForOutput(app, /flow plain step two/);
			await flow.send("go", { hello: "world" });
			await waitForOutput(app, /flow plain step three/);
			const state = await flow.status();
			assert.deepEqual(state, {
				count: 111,
				runs: { one: 1, two: 1, three: 1 },
				message: { hello: "world" },
				finished: true,
			});
			await interrupt(app);
		});

		test("after a SIGKILL of the host mid-workflow, completed steps do not run again", async () => {
			let app = await start();
			const flow = client.flow.getOrCreate(["killed"]);
			await flow.status();
			// Step one is flushed before the sleep; step two has just run.
			await waitForOutput(app, /flow killed step two/);
			app.child.kill("SIGKILL");
			await app.exit;

			app = await start();
			// The engine first has to notice the dead host and restart the actor.
			await waitFor(
				async () => {
					await flow.send("go", "after the crash");
					return true;
				},
				{
					timeoutMs: 120_000,
					intervalMs: 1_000,
					what: "a send after the restart",
				},
			);
			await waitFor(async () => (await flow.status())?.finished, {
				timeoutMs: 60_000,
				intervalMs: 500,
				what: "the workflow finished",
			});
			const state = await flow.status();
			const out = allOutput();
			assert.equal(count(out, "flow killed step one\\b"), 1, "step one ran once");
			assert.equal(count(out, "flow killed step three\\b"), 1, "step three ran once");
			// Step two ran once, or again if its flush had not committed when
			// the host died; either way its effect is in the state exactly once.
			const twoRuns = count(out, "flow killed step two\\b");
			assert.ok(twoRuns === 1 || twoRuns === 2, `step two ran ${twoRuns} times`);
			assert.deepEqual(state, {
				count: 111,
				runs: { one: 1, two: 1, three: 1 },
				message: "after the crash",
				finished: true,
			});
			await interrupt(app);
		});
	});
