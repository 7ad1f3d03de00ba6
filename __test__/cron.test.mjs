// Cron jobs end to end: the RivetKit app on this addon under both versions
// (test/queues-cron-server.mjs of the example, actor `ticker`; rivetkit
// 2.3.19 on engine 2.3, rivetkit 3.0.0 on engine 3.0) driven by that
// version's official client. `ticker` sets jobs with
// `c.cron.every/set`, and its `tick` action records every fire. It sleeps
// after 2 s idle, so a job every 5 s also wakes it through the engine alarm.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import {
	appEnv,
	engineArchOf,
	interrupt,
	isError,
	startApp,
	startAppWithClient,
	waitForOutput,
} from "./helpers/app.mjs";
import { startEngine, waitFor } from "./helpers/engine.mjs";

const POOL = "cron";
/** Long enough for a few fires of a 5 s job (and a wake from sleep). */
const FIRES_TIMEOUT_MS = 40_000;

/** The hour and minute of `ms` on the clock of `timeZone`. */
function wallClock(ms, timeZone) {
	return new Intl.DateTimeFormat("en-GB", { timeZone, hour: "2-digit", minute: "2-digit", hourCycle: "h23" }).format(
		ms,
	);
}

for (const version of ["2", "3"])
	describe(`cron jobs on a RivetKit ${version === "3" ? "3.0.0" : "2.3.19"} app`, () => {
		let engine;
		let app;
		let client;

		before(async () => {
			engine = await startEngine({ arch: engineArchOf(version) });
			({ app, client } = await startAppWithClient("test/queues-cron-server.mjs", {
				rivetkit: version,
				engine,
				pool: POOL,
			}));
		});

		after(async () => {
			if (app && !app.exited) await interrupt(app);
			await engine?.stop();
		});

		test("an every job fires repeatedly, waking the sleeping actor; get, list and history show it; after delete it stops", async () => {
			const ticker = client.ticker.getOrCreate(["every"]);
			const before = Date.now();
			const from = app.out.length;
			await ticker.every(5_000, 10);

			const job = await ticker.get("tick");
			assert.equal(job.name, "tick");
			assert.equal(job.kind, "every");
			assert.equal(job.interval, 5_000);
			assert.equal(job.action, "tick");
			assert.deepEqual(job.args, ["every"]);
			assert.equal(job.maxHistory, 10);
			assert.ok(job.nextRunAt >= before + 5_000, `next run ${job.nextRunAt} is an interval after it was set`);
			assert.deepEqual(
				(await ticker.list()).map((j) => j.name),
				["tick"],
			);
			// Left alone it sleeps (2 s idle), and the engine alarm wakes it for the fire.
			const asleep = await waitForOutput(app, /ticker every going to sleep/, { from });
			const fired = await waitForOutput(app, /ticker every tick every/, { from: asleep });
			assert.match(app.out.slice(asleep, fired), /ticker every awake/);

			const ticks = await waitFor(
				async () => {
					const ticks = await ticker.ticks();
					return ticks.length >= 2 && ticks;
				},
				{ timeoutMs: FIRES_TIMEOUT_MS, what: "two fires of the job" },
			);
			const [first, second] = ticks;
			assert.equal(first.label, "every");
			assert.deepEqual(
				{ kind: first.fire.kind, id: first.fire.id, name: first.fire.name },
				{ kind: "every", id: "tick", name: "tick" },
			);
			assert.equal(first.fire.scheduledAt, job.nextRunAt);
			assert.ok(first.fire.firedAt >= first.fire.scheduledAt);
			assert.equal(second.fire.scheduledAt, job.nextRunAt + 5_000, "the next fire is one interval later");

			const history = await waitFor(
				async () => {
					const history = await ticker.history("tick");
					return history.length >= 2 && history.every((h) => h.result === "ok") && history;
				},
				{ what: "two finished fires in the history" },
			);
			assert.equal(history[0].action, "tick");
			assert.ok(history[0].firedAt >= history[1].firedAt, "newest first");
			assert.ok(history[1].finishedAt >= history[1].firedAt);
			assert.equal(history[history.length - 1].scheduledAt, job.nextRunAt);
			assert.equal((await ticker.history("tick", 1)).length, 1);
			const later = await ticker.get("tick");
			assert.ok(later.lastRunAt >= second.fire.firedAt);
			assert.ok(later.nextRunAt > second.fire.scheduledAt);

			assert.equal(await ticker.remove("tick"), true);
			assert.equal(await ticker.remove("tick"), false);
			assert.equal(await ticker.get("tick"), null);
			assert.deepEqual(await ticker.history("tick"), []);
			const count = (await ticker.ticks()).length;
			// Past the next run it had: no fire.
			await new Promise((resolve) => setTimeout(resolve, Math.max(0, later.nextRunAt - Date.now()) + 2_000));
			assert.equal((await ticker.ticks()).length, count, "no fire after delete");
		});

		test("a cron expression in a time zone, and the reference's errors", async () => {
			const ticker = client.ticker.getOrCreate(["set"]);
			await ticker.set("0 9 * * *", "Europe/Paris");
			const job = await ticker.get("daily");
			assert.equal(job.kind, "cron");
			assert.equal(job.expression, "0 9 * * *");
			assert.equal(job.timezone, "Europe/Paris");
			assert.equal(job.maxHistory, 100);
			assert.equal(wallClock(job.nextRunAt, "Europe/Paris"), "09:00");
			assert.ok(job.nextRunAt > Date.now() && job.nextRunAt - Date.now() <= 25 * 3_600_000);
			await ticker.set("*/15 * * * *");
			assert.equal((await ticker.get("daily")).timezone, "UTC");

			await assert.rejects(ticker.set("* * * *"), isError("schedule", "invalid_cron_expression"));
			await assert.rejects(ticker.set("* * * * *", "Mars/Olympus"), isError("schedule", "invalid_timezone"));
			await assert.rejects(ticker.every(1_000), (err) => {
				isError("schedule", "invalid_interval")(err);
				assert.match(err.message, /at least 5000 ms; received 1000 ms/);
				return true;
			});
			await assert.rejects(ticker.every(5_000, 5_000), isError("schedule", "invalid_max_history"));
			assert.deepEqual(
				(await ticker.list()).map((j) => j.name),
				["daily"],
			);
		});

		test("a job survives a host restart", async () => {
			const ticker = client.ticker.getOrCreate(["restart"]);
			await ticker.every(5_000);
			await waitFor(async () => (await ticker.ticks()).length >= 1, {
				timeoutMs: FIRES_TIMEOUT_MS,
				what: "a first fire",
			});

			// Ctrl-C: RivetKit drains (every actor sleeps), then a new host.
			const exited = await interrupt(app);
			assert.equal(exited.killed, false, `the host exited after SIGINT\n${app.out.slice(-2000)}`);
			app = startApp("test/queues-cron-server.mjs", appEnv(engine, POOL), { rivetkit: version });
			await waitForOutput(app, /registry serving/);

			const atRestart = (await ticker.ticks()).length;
			assert.equal((await ticker.get("tick")).interval, 5_000, "the job is still there");
			await waitFor(async () => (await ticker.ticks()).length > atRestart, {
				timeoutMs: FIRES_TIMEOUT_MS,
				what: "a fire on the new host",
			});
			assert.match(app.out, /ticker restart tick every/, "it fired on the new host");
		});
	});
