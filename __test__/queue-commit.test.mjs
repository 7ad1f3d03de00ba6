// Queue messages consumed with the state (docs/queues-cron.md, "Consumed
// with the state"), on the real engine under both RivetKit versions
// (rivetkit 2.3.19 on engine 2.3, 3.0.0 on engine 3.0): the example's
// test/queue-commit-server.mjs, its host SIGKILLed.
//
// - Kill loop and order: the test sends 1,000 numbered messages, one at a
//   time with the client's `send`; the host is SIGKILLed and started again
//   while it sends (at the 250th, 500th and 750th acknowledged send) and the
//   actor works through what is queued. A send that fails as the host dies
//   is sent again marked as such (it may have been queued), and the actor
//   skips a number it already took only for such a resend. Its state must
//   have taken every number once and in order: `gaps` records any number
//   that was not the previous one plus 1 (a loss, a duplicate, or a
//   message out of order).
// - Fence: host A reaches the engine through a TCP proxy that holds every
//   byte (helpers/fault-proxy.mjs), host B directly. While A's actor works
//   through 200 queued messages the proxy holds A's bytes until A's lease
//   runs out and A fences its actor (docs/durability.md, "The lease"); the
//   engine declares A lost and a request starts the actor on B, and the
//   hold lasts until B has handled more. Then the release delivers what A
//   sent before the fence if the engine still holds that connection (in a
//   run under engine 2.3.19 whose log was read, it no longer did: it had
//   closed it at its 15 s ping timeout, 11 s before the release), 100 more
//   messages are sent, and the state must have taken every number once and
//   in order. The lease works the same on both engines
//   (docs/engine.md), so one engine suffices.
// - Completion: a completable message whose handler completes it and
//   SIGKILLs the host at once. The message changes the saved state once
//   (the first host's save landed, or the next host received it again), and
//   a completion the waiting sender got is the one of that handling.
// - Poison: a message whose handling SIGKILLs the host every time becomes
//   the dead letter `$dead:p` after RIVETKIT_QUEUE_MAX_DELIVERIES (2 here)
//   tries, and the message behind it is handled.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { engineArchOf, engineClient, startApp, startAppWithClient, waitForOutput } from "./helpers/app.mjs";
import { startEngine, waitFor } from "./helpers/engine.mjs";
import { faultProxy } from "./helpers/fault-proxy.mjs";

const pause = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

const POOL = "queue-commit";
const SCRIPT = "test/queue-commit-server.mjs";
const TOTAL = 1000;
/** The producer's acknowledged counts at which the host is SIGKILLed. */
const KILLS_AT = [250, 500, 750];
const ENV = { RIVETKIT_QUEUE_MAX_DELIVERIES: "2" };
/** Messages queued before the partition in the fence case. */
const FENCED = 200;

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

		test("a host SIGKILLed 3 times while a producer sends 1,000 messages: each counted once, in order", async (t) => {
			const summer = client.summer.getOrCreate(["kills"]);
			await waitFor(() => summer.progress(), { what: "the summer awake", timeoutMs: 60_000 });
			// The producer: one send at a time, each acknowledged before the
			// next. A send that fails (the host died under it) may have been
			// queued all the same, so it is sent again marked `again`.
			let acked = 0;
			let failed = 0;
			const producer = (async () => {
				let again = false;
				for (let n = 1; n <= TOTAL; ) {
					try {
						await summer.send("n", again ? { n, again } : { n });
						acked = n;
						again = false;
						n += 1;
					} catch {
						failed += 1;
						again = true;
						await pause(100);
					}
				}
			})();
			// Kills while the producer sends and the actor works through
			// what it queued.
			let kills = 0;
			for (const at of KILLS_AT) {
				await waitFor(() => acked >= at, { what: `the producer past ${at}`, timeoutMs: 120_000 });
				await kill();
				kills += 1;
				await restart();
			}
			await producer;
			const done = await waitFor(
				async () => {
					const p = await summer.progress();
					return p.last === TOTAL && p;
				},
				{ what: "every message consumed", timeoutMs: 120_000 },
			);
			t.diagnostic(
				`${kills} kills; ${failed} sends failed and were sent again; ${await summer.resent()} of those had been queued`,
			);
			assert.equal(kills, KILLS_AT.length);
			assert.deepEqual(done, { last: TOTAL, count: TOTAL, sum: (TOTAL * (TOTAL + 1)) / 2, gaps: [] });
		});

		test("a host fenced by a partition while the actor consumes: each message counted once, in order, on the next host", async (t) => {
			const pool = `${POOL}-fence`;
			const proxy = await faultProxy(engine.guardPort);
			const hosts = [];
			const host = async (name, endpoint) => {
				const started = startApp(SCRIPT, { ...env, RIVET_POOL: pool, RIVET_ENDPOINT: endpoint }, { rivetkit: version });
				started.name = name;
				hosts.push(started);
				await waitForOutput(started, /registry serving/);
				return started;
			};
			try {
				const a = await host("a", proxy.url);
				const client = await engineClient(version, engine, pool);
				const summer = client.summer.getOrCreate(["fence"]);
				const progress = () => waitFor(() => summer.progress(), { what: "the summer's progress", timeoutMs: 60_000 });
				// The actor starts on A (B is not up yet); then B starts, and
				// the messages are queued and acknowledged on A.
				await progress();
				const b = await host("b", engine.endpoint);
				await summer.produce(1, FENCED);
				await waitFor(async () => (await progress()).last >= 20, { what: "A under way" });
				const cut = a.out.length;
				/** The number the summer had taken when it woke on B, once it did. */
				const wokeOnB = () => {
					const m = /summer fence awake at (\d+)/.exec(b.out);
					return m && { at: Number(m[1]) };
				};
				proxy.hold();
				// A fences its actor once its lease runs out.
				await waitForOutput(a, /declaring envoy actors lost/, { from: cut, timeoutMs: 60_000 });
				// A request wakes the actor on B (engine 2.3.19 starts a lost
				// actor again only for one: without, it stayed down for 60 s);
				// it goes on consuming while what A sent before the fence is
				// still held.
				const resumed = await waitFor(
					() => {
						summer.progress().catch(() => {});
						return wokeOnB();
					},
					{ what: "the summer awake on B", timeoutMs: 60_000, intervalMs: 1_000 },
				);
				assert.ok(resumed.at < FENCED, `the fence came while messages were being handled (B woke at ${resumed.at})`);
				await waitFor(async () => (await progress()).last > resumed.at, {
					what: "the actor consuming during the partition",
					timeoutMs: 60_000,
				});
				proxy.release();
				await summer.produce(FENCED + 1, FENCED + 100);
				const done = await waitFor(
					async () => {
						const p = await progress();
						return p.last === FENCED + 100 && p;
					},
					{ what: "every message consumed", timeoutMs: 120_000 },
				);
				t.diagnostic(`A fenced; the summer woke on B at ${resumed.at} of ${FENCED} and went on during the partition`);
				const total = FENCED + 100;
				assert.deepEqual(done, { last: total, count: total, sum: (total * (total + 1)) / 2, gaps: [] });
			} catch (err) {
				// What each host said: the cause of a rare failure is in it.
				for (const h of hosts) err.message += `\n--- host ${h.name} (last 6 KiB) ---\n${h.out.slice(-6144)}`;
				throw err;
			} finally {
				for (const h of hosts) if (!h.exited) h.child.kill("SIGKILL");
				await Promise.all(hosts.map((h) => h.exit));
				await proxy.close();
			}
		});

		test("a waiting sender gets a completion only for a message that is never handled again", async (t) => {
			const asker = client.asker.getOrCreate(["ask"]);
			const first = await asker.pid();
			// The handler completes the message, then SIGKILLs its host.
			const answer = asker.send("q", "x", { wait: true, timeout: 60_000 }).then(
				(result) => ({ result }),
				(error) => ({ error }),
			);
			await waitFor(() => app.exited, { what: "the host killed by the handler", timeoutMs: 60_000 });
			app = startApp(SCRIPT, { ...env, ASKER_CALM: "1" }, { rivetkit: version });
			await waitForOutput(app, /registry serving/);
			const handledBy = await waitFor(
				async () => {
					const by = await asker.handledBy();
					return by.length > 0 && by;
				},
				{ what: "the message handled in a saved state", timeoutMs: 60_000 },
			);
			const got = await answer;
			t.diagnostic(
				`first host ${first}; saved handlings by ${handledBy.join(", ")}; the sender got ${
					got.error ? `an error: ${got.error.message}` : JSON.stringify(got.result)
				}`,
			);
			// Consumed once: by the first host (its save landed before the
			// kill) or by the next (it received the message again).
			assert.equal(handledBy.length, 1, "the message changed the saved state once");
			if (got.result?.status === "completed")
				assert.deepEqual(
					got.result.response,
					{ pid: handledBy[0], body: "x" },
					"the completion of the handling that was saved",
				);
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
