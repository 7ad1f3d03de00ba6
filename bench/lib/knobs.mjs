// The bench's knobs: positive integers read from the environment.

/** The positive integer in environment variable `name`, else `fallback`. */
export function int(name, fallback) {
	const value = Number.parseInt(process.env[name] ?? "", 10);
	return Number.isFinite(value) && value > 0 ? value : fallback;
}
