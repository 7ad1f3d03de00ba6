// The RivetKit app of the side-by-side comparison (bench/compare.mjs): plain
// `actor()`/`setup()` from "rivetkit", nothing addon-specific. The same file
// runs on @rivetkit/rivetkit-napi@2.3.19 and (a copy of it, made by
// bench/lib/rivetkit-alias.mjs) on rivetkit-native.
//
//   counter  actions: increment(by = 1) → count (state saved), get() → count
//
// Actors stay awake (sleepTimeout 10 min) so "live actors" stay live while
// they are counted.

import { actor, setup } from "rivetkit";

export const counter = actor({
	state: { count: 0 },
	actions: {
		increment: (c, by = 1) => {
			c.state.count += by;
			return c.state.count;
		},
		get: (c) => c.state.count,
	},
	options: { sleepTimeout: 600_000 },
});

export const registry = setup({ use: { counter }, noWelcome: true });
