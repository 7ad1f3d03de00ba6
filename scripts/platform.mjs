// The napi-rs platform name of this host ("linux-x64-gnu", "darwin-arm64",
// "win32-x64-msvc", ...): the suffix of `rivetkit-native.<platform>.node`
// and the directory of its package under npm/.

import { readFileSync } from "node:fs";

export function isMusl() {
	if (process.platform !== "linux") return false;
	try {
		return readFileSync("/usr/bin/ldd", "utf8").includes("musl");
	} catch {}
	return !process.report?.getReport()?.header?.glibcVersionRuntime;
}

export function hostPlatform() {
	const { platform, arch } = process;
	if (platform === "linux") return `linux-${arch}-${isMusl() ? "musl" : "gnu"}`;
	if (platform === "win32") return `win32-${arch}-msvc`;
	return `${platform}-${arch}`;
}

export const BINARY_NAME = "rivetkit-native";
