// Raw HTTP and WebSocket handlers, for protocols of your own next to (or
// instead of) actions: a client's `handle.fetch(path)` arrives in
// `onRequest` as a standard `Request`, and `handle.webSocket(path)` in
// `onWebSocket` as a standard WebSocket.

import { actor } from "rivetkit";

export const echo = actor({
	onRequest: async (c, request) => {
		const url = new URL(request.url);
		return Response.json({
			actor: c.key.join("/"),
			method: request.method,
			path: url.pathname,
			query: Object.fromEntries(url.searchParams),
			body: request.method === "GET" ? null : await request.text(),
		});
	},
	onWebSocket: (c, websocket) => {
		websocket.send(`hello from echo ${c.key.join("/")}`);
		websocket.addEventListener("message", (event) => {
			websocket.send(event.data);
		});
	},
});
