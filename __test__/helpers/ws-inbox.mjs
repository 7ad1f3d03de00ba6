// A WebSocket's text messages as a queue the test reads in order.
//
//   const messages = inbox(ws);
//   assert.equal(await messages.next(), "hello");
//   assert.deepEqual(await messages.whenClosed(), { code: 1000, reason: "" });

/**
 * Collects `ws`'s text messages; `next()` resolves to the next one (and
 * rejects once the socket closed with none left), `closed` is `{code,
 * reason}` once it closed (else null), `whenClosed()` resolves to it.
 */
export function inbox(ws) {
	const messages = [];
	const waiters = [];
	let closed = null;
	let onClosed;
	const whenClosed = new Promise((resolve) => (onClosed = resolve));
	ws.addEventListener("message", (event) => {
		const text = typeof event.data === "string" ? event.data : Buffer.from(event.data).toString();
		const waiter = waiters.shift();
		if (waiter) waiter.resolve(text);
		else messages.push(text);
	});
	ws.addEventListener("close", (event) => {
		closed = { code: event.code, reason: event.reason };
		onClosed(closed);
		for (const waiter of waiters.splice(0)) waiter.reject(new Error(`socket closed ${JSON.stringify(closed)}`));
	});
	return {
		get closed() {
			return closed;
		},
		whenClosed: () => whenClosed,
		next() {
			if (messages.length) return Promise.resolve(messages.shift());
			if (closed) return Promise.reject(new Error(`socket closed ${JSON.stringify(closed)}`));
			return new Promise((resolve, reject) => waiters.push({ resolve, reject }));
		},
	};
}
