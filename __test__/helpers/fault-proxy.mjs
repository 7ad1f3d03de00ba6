// A TCP proxy between one host and the engine that a test drives, for real
// network faults (docs/testing.md, "Faults"):
//
//   const proxy = await faultProxy(engine.port);   // host uses proxy.url
//   proxy.hold();      // nothing is delivered either way, connections stay open
//   proxy.release();   // everything held is delivered, in order
//   proxy.reset();     // every connection ends with a TCP reset
//   proxy.delay(200);  // each chunk is delivered 200 ms late (0: off)
//   proxy.retarget(p); // new connections go to port p (a load balancer
//                      // whose health check dropped the old target)
//   await proxy.down();  // every connection reset, the port closed
//   await proxy.up();    // listening again on the same port
//   await proxy.close();
//
// Holding pauses both sockets of every connection: what was sent stays in
// the kernel's buffers, as behind a dead switch, and arrives after the
// release. A connection opened during a hold is accepted and held too.

import { once } from "node:events";
import { connect, createServer } from "node:net";

/** `port`: the port it listens on (default: any free one). */
export async function faultProxy(targetPort, targetHost = "127.0.0.1", { port: listenPort = 0 } = {}) {
	const pairs = new Set();
	let holding = false;
	let delayMs = 0;
	let target = targetPort;

	const pipe = (from, to) => {
		from.on("data", (chunk) => {
			if (delayMs === 0) return void to.write(chunk);
			// Order is kept: every chunk waits the same time.
			setTimeout(() => to.writable && to.write(chunk), delayMs);
		});
	};

	const server = createServer((client) => {
		const upstream = connect(target, targetHost);
		const pair = { client, upstream };
		pairs.add(pair);
		pipe(client, upstream);
		pipe(upstream, client);
		const end = () => {
			pairs.delete(pair);
			client.destroy();
			upstream.destroy();
		};
		client.on("close", end);
		upstream.on("close", end);
		client.on("error", () => {});
		upstream.on("error", () => {});
		if (holding) {
			client.pause();
			upstream.pause();
		}
	});
	server.listen(listenPort, "127.0.0.1");
	await once(server, "listening");
	const { port } = server.address();

	return {
		port,
		url: `http://127.0.0.1:${port}`,
		/** How many connections pass through now. */
		get connections() {
			return pairs.size;
		},
		hold() {
			holding = true;
			for (const { client, upstream } of pairs) {
				client.pause();
				upstream.pause();
			}
		},
		release() {
			holding = false;
			for (const { client, upstream } of pairs) {
				client.resume();
				upstream.resume();
			}
		},
		reset() {
			for (const { client, upstream } of pairs) {
				client.resetAndDestroy();
				upstream.resetAndDestroy();
			}
		},
		/** Takes the target away: connections reset, new ones refused. */
		async down() {
			if (!server.listening) return;
			const closed = new Promise((resolve) => server.close(() => resolve()));
			this.reset();
			await closed;
		},
		/** Gives it back on the same port. */
		async up() {
			if (server.listening) return;
			server.listen(port, "127.0.0.1");
			await once(server, "listening");
		},
		delay(ms) {
			delayMs = ms;
		},
		retarget(port) {
			target = port;
		},
		close() {
			for (const { client, upstream } of pairs) {
				client.destroy();
				upstream.destroy();
			}
			return new Promise((resolve) => server.close(() => resolve()));
		},
	};
}
