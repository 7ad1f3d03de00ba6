// The app's registry: every actor it serves, by the name clients use
// (`client.counter`, `client.chatRoom`, ...). Server and tests import it.

import { setup } from "rivetkit";

import { chatRoom } from "./actors/chat-room.mjs";
import { counter } from "./actors/counter.mjs";
import { echo } from "./actors/echo.mjs";
import { reminders } from "./actors/reminders.mjs";

export const registry = setup({
	use: { counter, chatRoom, reminders, echo },
});
