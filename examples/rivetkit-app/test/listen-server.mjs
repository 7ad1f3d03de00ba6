// Test fixture (not part of the example): the app's actors behind
// `registry.listen({ application })`: the registry serves its actors as
// usual (an envoy connected to the engine) and the native listener on PORT
// answers RivetKit's routes under /api/rivet and hands every other request
// to this application's fetch handler.
//
//   PORT=3000 node test/listen-server.mjs

import { registry } from "../src/registry.mjs";

let releaseEvents;

const application = {
	async fetch(request) {
		const url = new URL(request.url);
		if (url.pathname === "/hello") {
			const body = request.method === "POST" ? await request.text() : null;
			return Response.json({ hello: url.searchParams.get("name") ?? "world", method: request.method, body });
		}
		if (url.pathname === "/fail") throw new Error("the application failed on purpose");
		if (url.pathname === "/events") {
			// Server-sent events: the second waits for POST /release.
			const encoder = new TextEncoder();
			const body = new ReadableStream({
				async start(controller) {
					controller.enqueue(encoder.encode("data: first\n\n"));
					await new Promise((resolve) => (releaseEvents = resolve));
					controller.enqueue(encoder.encode("data: second\n\n"));
					controller.close();
				},
			});
			return new Response(body, { headers: { "content-type": "text/event-stream" } });
		}
		if (url.pathname === "/release") {
			releaseEvents?.();
			return new Response("released");
		}
		return new Response("no such page\n", { status: 404, headers: { "content-type": "text/plain" } });
	},
};

await registry.listen({ application, port: Number(process.env.PORT) });
