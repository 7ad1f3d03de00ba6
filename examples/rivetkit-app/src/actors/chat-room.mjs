// A chat room: clients connect, send messages through an action and
// receive every message as a `newMessage` event. The history lives in the
// actor's state, so it is still there when the room wakes up again.

import { actor } from "rivetkit";

/** Older messages are dropped so the state stays small. */
const MAX_HISTORY = 100;

export const chatRoom = actor({
	state: { messages: [] },
	actions: {
		sendMessage: (c, sender, text) => {
			const message = { sender, text, timestamp: Date.now() };
			c.state.messages.push(message);
			if (c.state.messages.length > MAX_HISTORY) c.state.messages.shift();
			c.broadcast("newMessage", message);
			return message;
		},
		getHistory: (c) => c.state.messages,
	},
});
