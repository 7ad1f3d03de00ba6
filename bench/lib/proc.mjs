// CPU time of another process from /proc (Linux); `null` elsewhere.

import { readFileSync } from "node:fs";

/** Clock ticks per second of /proc/<pid>/stat times (USER_HZ, 100 on Linux). */
const TICKS_PER_SECOND = 100;

/** User + system CPU ms used so far by process `pid`, or `null`. */
export function processCpuMs(pid) {
	try {
		const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
		// Fields after the command name, which is in parentheses and may hold spaces.
		const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
		const utime = Number(fields[11]);
		const stime = Number(fields[12]);
		return ((utime + stime) * 1000) / TICKS_PER_SECOND;
	} catch {
		return null;
	}
}

/**
 * CPU ms the main thread of process `pid` (its JavaScript thread, for a
 * Node process) ran so far, from /proc/<pid>/task/<pid>/schedstat
 * (nanoseconds), or `null`.
 */
export function mainThreadCpuMs(pid) {
	try {
		return Number(readFileSync(`/proc/${pid}/task/${pid}/schedstat`, "utf8").split(" ")[0]) / 1e6;
	} catch {
		return null;
	}
}
