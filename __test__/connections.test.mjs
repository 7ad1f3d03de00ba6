// Connections with the official client of rivetkit@2.3.19: `.connect()`,
// actions over the socket, events and broadcasts, connection params and
// refusals, in each encoding.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { ARCHES, startEngine, waitFor } from "./helpers/engine.mjs";
import { native, serveActors } from "./helpers/actors.mjs";
import { ENCODINGS, bridgedError, cborDecode, cborEncode, officialClient } from "./helpers/client.mjs";

describe("actor-connect with the official client", () => {
	let engine;
	let host;
	const disconnects = [];

	before(async () => {
		engine = await startEngine({ arch: "v3" });
		const chat = new native.NapiActorFactory({
			createState: async () => cborEncode({ messages: [] }),
			onBeforeConnect: async (_e, { params }) => {
				const p = cborDecode(params);
				if (p?.token === "bad") throw bridgedError({ group: "auth", code: "forbidden", message: "bad token" });
			},
			createConnState: async (_e, { params }) => cborEncode({ name: cborDecode(params)?.name ?? "anon" }),
			onDisconnect: async (_e, { conn }) => disconnects.push(conn.id()),
			actions: {
				say: async (_e, { ctx, conn, args }) => {
					const [text] = cborDecode(args);
					const who = cborDecode(conn.state()).name;
					ctx.broadcast("message", cborEncode([`${who}: ${text}`]));
					return cborEncode(`${who} said ${text}`);
				},
				whoami: async (_e, { conn }) => cborEncode(conn ? cborDecode(conn.state()).name : null),
				add: async (_e, { args }) => {
					const [a, b] = cborDecode(args);
					return cborEncode(a + b);
				},
				fail: async () => {
					throw bridgedError({ group: "user", code: "nope", message: "not today" });
				},
				ping: async (_e, { conn }) => {
					conn.send("pong", cborEncode(["just you"]));
					return cborEncode(true);
				},
			},
		});
		host = await serveActors(engine, { chat });
	});

	after(async () => {
		await host?.stop();
		await engine?.stop();
	});

	for (const encoding of ENCODINGS) {
		test(`${encoding}: actions over the connection, params and conn state`, async () => {
			const client = officialClient(engine, host.pool, encoding);
			const conn = client.chat.getOrCreate([`room-${encoding}`], { params: { name: "ada" } }).connect();
			try {
				assert.equal(await conn.add(2, 3), 5);
				assert.equal(await conn.whoami(), "ada");
				const results = await Promise.all([conn.add(1, 1), conn.add(2, 2), conn.add(3, 3)]);
				assert.deepEqual(results, [2, 4, 6]);
				await assert.rejects(conn.fail(), (err) => {
					assert.equal(err.group, "user");
					assert.equal(err.code, "nope");
					return true;
				});
				assert.equal(await conn.add(1, 2), 3, "the connection survives an action error");
			} finally {
				await conn.dispose();
			}
		});

		test(`${encoding}: broadcasts reach subscribed connections; unsubscribing stops them`, async () => {
			const client = officialClient(engine, host.pool, encoding);
			const handle = client.chat.getOrCreate([`broadcast-${encoding}`]);
			const a = handle.connect({ name: "a" });
			const b = handle.connect({ name: "b" });
			const gotA = [];
			const gotB = [];
			const unsubscribeA = a.on("message", (m) => gotA.push(m));
			b.on("message", (m) => gotB.push(m));
			try {
				// Subscriptions are sent on connect; an action round trip on each
				// connection makes sure they arrived.
				await a.whoami();
				await b.whoami();
				assert.equal(await a.say("hi"), "a said hi");
				await waitFor(() => gotA.length === 1 && gotB.length === 1, { what: "both broadcasts" });
				assert.deepEqual(gotA, ["a: hi"]);

				unsubscribeA();
				await a.whoami();
				await b.say("again");
				await waitFor(() => gotB.length === 2, { what: "the second broadcast" });
				await a.whoami();
				assert.equal(gotA.length, 1, "an unsubscribed connection gets no more events");
			} finally {
				await a.dispose();
				await b.dispose();
			}
		});

		test(`${encoding}: a refused connection gives the client the error`, async () => {
			const client = officialClient(engine, host.pool, encoding);
			const conn = client.chat.getOrCreate([`refuse-${encoding}`], { params: { token: "bad" } }).connect();
			const errors = [];
			conn.onError((err) => errors.push(err));
			try {
				await assert.rejects(conn.add(1, 1), (err) => {
					assert.equal(err.group, "auth");
					assert.equal(err.code, "forbidden");
					return true;
				});
			} finally {
				await conn.dispose();
			}
		});
	}

	test("conn.send reaches only that connection; disconnect runs onDisconnect", async () => {
		const client = officialClient(engine, host.pool, "json");
		const conn = client.chat.getOrCreate(["send"]).connect();
		const pongs = [];
		conn.on("pong", (m) => pongs.push(m));
		await conn.whoami();
		assert.equal(await conn.ping(), true);
		await waitFor(() => pongs.length === 1, { what: "pong" });
		const before = disconnects.length;
		await conn.dispose();
		await waitFor(() => disconnects.length === before + 1, { what: "onDisconnect" });
	});
});

// Engine 2.3 keeps a hibernatable socket open at its gateway while the
// actor sleeps; engine 3.0 closes it when the actor stops.
for (const arch of ARCHES) {
	describe(`hibernatable connections, engine ${arch}`, () => {
		let engine;
		let host;
		const connects = [];
		const wakes = [];
		const sleeps = [];

		before(async () => {
			engine = await startEngine({ arch });
			const callbacks = {
				createState: async () => cborEncode({}),
				onWake: async (_e, { ctx }) => wakes.push(ctx.generation()),
				onSleep: async (_e, { ctx }) => sleeps.push(ctx.generation()),
				onConnect: async (_e, { conn }) => connects.push(conn.id()),
				createConnState: async () => cborEncode({ seen: 0 }),
				actions: {
					visit: async (_e, { conn }) => {
						const state = cborDecode(conn.state());
						state.seen += 1;
						conn.setState(cborEncode(state));
						return cborEncode({ seen: state.seen, hibernatable: conn.isHibernatable() });
					},
					nap: async (_e, { ctx }) => {
						ctx.sleep();
						return cborEncode(true);
					},
				},
			};
			const room = new native.NapiActorFactory(callbacks);
			// The same actor, its actor-connect sockets not allowed to hibernate.
			const wakeful = new native.NapiActorFactory(callbacks, { canHibernateConnect: false });
			// RivetKit 2.3's contract: `/connect` sockets hibernate by default
			// (docs/versions.md; under 3.0 they close on sleep).
			host = await serveActors(engine, { room, wakeful }, { serverlessPackageVersion: "2.3.19" });
		});

		after(async () => {
			await host?.stop();
			await engine?.stop();
		});

		for (const encoding of ENCODINGS) {
			test(`${encoding}: a connected client keeps working across sleep and wake, without reconnecting`, async () => {
				const client = officialClient(engine, host.pool, encoding);
				const conn = client.room.getOrCreate([`nap-${encoding}`]).connect();
				try {
					assert.deepEqual(await conn.visit(), { seen: 1, hibernatable: true });
					const connectsBefore = connects.length;
					const wakesBefore = wakes.length;
					const sleepsBefore = sleeps.length;
					assert.equal(await conn.nap(), true);
					await waitFor(() => sleeps.length > sleepsBefore, { timeoutMs: 30_000, what: "the actor to sleep" });
					if (arch === "v3") {
						// Engine 3.0 closes the socket as the actor stops (1012
						// `actor.stopped`, as under the official napi 3.0.0;
						// docs/engine.md): the client connects again, which wakes
						// the actor, and the connection starts afresh.
						await waitFor(() => connects.length > connectsBefore, { what: "the client to connect again" });
						assert.deepEqual(await conn.visit(), { seen: 1, hibernatable: true }, "a new connection");
						assert.ok(wakes.length > wakesBefore, "a new generation served the connection");
						return;
					}
					// Asleep (its onSleep ran); the client's socket stays open at the gateway.
					// The next action wakes the actor if it is still asleep.
					assert.deepEqual(await conn.visit(), { seen: 2, hibernatable: true }, "conn state survived");
					assert.ok(wakes.length > wakesBefore, "a new generation served the connection");
					assert.equal(connects.length, connectsBefore, "no second onConnect: the client did not reconnect");
				} finally {
					await conn.dispose();
				}
			});
		}

		test("canHibernateConnect: false: the connection is not hibernatable", async () => {
			const client = officialClient(engine, host.pool, "json");
			const conn = client.wakeful.getOrCreate(["awake"]).connect();
			try {
				assert.deepEqual(await conn.visit(), { seen: 1, hibernatable: false });
			} finally {
				await conn.dispose();
			}
		});
	});
}
