// Queue messages consumed with the state (docs/queues-cron.md, "Consumed
// with the state"), on the real engine under both RivetKit versions
// (rivetkit 2.3.19 on engine 2.3, 3.0.0 on engine 3.0): the example's
// test/queue-commit-server.mjs, its host SIGKILLed.
//
// - Kill loop and order: one producer (an action of the actor, so that a
//   burst is one call) sends 1,000 numbered messages in bursts; while the actor works through each burst the host is
//   SIGKILLed and started again (3 times). Its state must have taken every
//   number once and in order: `gaps` records any number that was not the
//   previous one plus 1 (a loss, a duplicate, or a message out of order).
// - Poison: a message whose handling SIGKILLs the host every time becomes
//   the dead letter `$dead:p` after RIVETKIT_QUEUE_MAX_DELIVERIES (2 here)
//   tries, and the message behind it is handled.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { engineArchOf, startApp, startAppWithClient, waitForOutput } from "./helpers/app.mjs";
import { startEngine, waitFor } from "./helpers/engine.mjs";

const POOL = "queue-commit";
const SCRIPT = "test/queue-commit-server.mjs";
const TOTAL = 1000;
const BURSTS = 4;
const ENV = { RIVETKIT_QUEUE_MAX_DELIVERIES: "2" };

for (const version of ["2", "3"])
	describe(`queue messages consumed with the state, RivetKit ${version === "3" ? "3.0.0" : "2.3.19"}`, () => {
		let engine;
		let app;
		let client;
		let env;

		const kill = async () => {
			app.child.kill("SIGKILL");
			await app.exit;
		};
		const restart = async () => {
			app = startApp(SCRIPT, env, { rivetkit: version });
			await waitForOutput(app, /registry serving/);
		};

		before(async () => {
			engine = await startEngine({ arch: engineArchOf(version) });
			({ app, client } = await startAppWithClient(SCRIPT, { rivetkit: version, engine, pool: POOL, env: ENV }));
			env = {
				RIVET_ENDPOINT: engine.endpoint,
				RIVET_TOKEN: engine.token,
				RIVET_POOL: POOL,
				...ENV,
			};
		});

		after(async () => {
			if (app && !app.exited) await kill();
			await engine?.stop();
		});

		test("a host SIGKILLed while the actor consumes 1,000 messages: each counted once, in order", async () => {
			const summer = client.summer.getOrCreate(["kills"]);
			const progress = () => waitFor(() => summer.progress(), { what: "the summer's progress", timeoutMs: 60_000 });
			const perBurst = TOTAL / BURSTS;
			let kills = 0;
			for (let burst = 0; burst < BURSTS; burst++) {
				const first = burst * perBurst + 1;
				await summer.produce(first, first + perBurst - 1);
				if (burst === BURSTS - 1) break;
				// Mid-burst: some of it consumed, the rest queued.
				await waitFor(async () => (await summer.progress()).last >= first + 20, { what: "the burst under way" });
				await kill();
				kills += 1;
				await restart();
				await progress();
			}
			const done = await waitFor(
				async () => {
					const p = await summer.progress();
					return p.last === TOTAL && p;
				},
				{ what: "every message consumed", timeoutMs: 120_000 },
			);
			assert.equal(kills, BURSTS - 1);
			assert.deepEqual(done, { last: TOTAL, count: TOTAL, sum: (TOTAL * (TOTAL + 1)) / 2, gaps: [] });
		});

		test("a message that kills its host every time becomes a dead letter; the one behind it is handled", async () => {
			const poisoned = client.poisoned.getOrCreate(["poison"]);
			assert.deepEqual(await poisoned.done(), []);
			await poisoned.send("p", "die");
			await poisoned.send("p", "after");
			// Answered, or refused as the host dies under it: armed either way.
			await poisoned.arm().catch(() => {});
			// Each try ends the host: start it again and wake the actor (the
			// call that wakes it fails as the host dies under it).
			for (let tries = 1; tries <= 2; tries++) {
				await waitFor(() => app.exited, { what: `the host killed by try ${tries}`, timeoutMs: 60_000 });
				await restart();
				poisoned.done().catch(() => {});
			}
			await waitFor(async () => (await poisoned.done()).includes("after"), {
				what: "the message behind the poison one",
				timeoutMs: 60_000,
			});
			assert.equal(app.exited, null, "the third generation did not run it");
			assert.deepEqual(await poisoned.done(), ["after"]);
			assert.deepEqual(await poisoned.deadLetters(), [["$dead:p", "die"]]);
			assert.deepEqual(await poisoned.deadLetters(), [], "read once: consumed");
		});
	});
