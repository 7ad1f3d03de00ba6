// Raw HTTP and WebSocket handlers, for protocols of your own next to (or
// instead of) actions: a client's `handle.fetch(path)` arrives in
// `onRequest` as a standard `Request`, and `handle.webSocket(path)` in
// `onWebSocket` as a standard WebSocket.
//
// Its WebSockets hibernate (`canHibernateWebSocket`): the actor can sleep
// while a client's socket stays open; the client's next message wakes it,
// and the new generation runs `onWebSocket` again on the same socket (so
// the greeting names the wake it came from).

import { actor } from "rivetkit";

const key = (c) => c.key.join("/");

export const echo = actor({
	state: { wakes: 0 },
	onRequest: async (c, request) => {
		const url = new URL(request.url);
		return Response.json({
			actor: key(c),
			method: request.method,
			path: url.pathname,
			query: Object.fromEntries(url.searchParams),
			body: request.method === "GET" ? null : await request.text(),
		});
	},
	onWebSocket: (c, websocket) => {
		websocket.send(`hello from echo ${key(c)} (wake ${c.state.wakes})`);
		websocket.addEventListener("message", (event) => {
			// `sleep` puts the actor to sleep; the socket stays open.
			if (event.data === "sleep") {
				websocket.send("sleeping");
				c.sleep();
				return;
			}
			websocket.send(event.data);
		});
	},
	onWake: (c) => {
		c.state.wakes += 1;
		console.log(`echo ${key(c)} awake (wake ${c.state.wakes})`);
	},
	onSleep: (c) => {
		console.log(`echo ${key(c)} going to sleep`);
	},
	options: { canHibernateWebSocket: true },
});
