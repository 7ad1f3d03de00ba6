#!/usr/bin/env node
// Prints the highest glibc symbol version (GLIBC_x.y) a built addon needs and
// fails if it is above the limit (2.30 by default, RIVETKIT_NATIVE_MAX_GLIBC
// overrides): the oldest glibc the binary loads on.
//
//   node scripts/check-glibc.mjs [file.node]
//
// Without an argument it checks the release binary of this host's platform
// package (npm/<platform>/, where `npm run build` copies it), else the one
// in the repository root. The version needs are read from the ELF's
// .gnu.version_r section by the parser below; when `readelf` is on PATH its
// answer is compared with ours. Hosts that are not Linux glibc have nothing
// to check.

import { execFileSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";

import { BINARY_NAME, hostPlatform } from "./platform.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const LIMIT = process.env.RIVETKIT_NATIVE_MAX_GLIBC || "2.30";

/** The version needs of an ELF file: [{file: "libc.so.6", versions: ["GLIBC_2.2.5", ...]}]. */
export function elfVersionNeeds(buf) {
	if (buf.readUInt32BE(0) !== 0x7f454c46) throw new Error("not an ELF file");
	const is64 = buf[4] === 2;
	const le = buf[5] === 1;
	const u16 = (o) => (le ? buf.readUInt16LE(o) : buf.readUInt16BE(o));
	const u32 = (o) => (le ? buf.readUInt32LE(o) : buf.readUInt32BE(o));
	const addr = (o) => (is64 ? Number(le ? buf.readBigUInt64LE(o) : buf.readBigUInt64BE(o)) : u32(o));
	const shoff = addr(is64 ? 0x28 : 0x20);
	const shentsize = u16(is64 ? 0x3a : 0x2e);
	const shnum = u16(is64 ? 0x3c : 0x30);
	const section = (i) => {
		const o = shoff + i * shentsize;
		return {
			type: u32(o + 4),
			offset: addr(o + (is64 ? 0x18 : 0x10)),
			size: addr(o + (is64 ? 0x20 : 0x14)),
			link: u32(o + (is64 ? 0x28 : 0x18)),
			info: u32(o + (is64 ? 0x2c : 0x1c)),
		};
	};
	const cstring = (o) => buf.toString("latin1", o, buf.indexOf(0, o));
	const SHT_GNU_VERNEED = 0x6ffffffe;
	const needs = [];
	for (let i = 0; i < shnum; i++) {
		const s = section(i);
		if (s.type !== SHT_GNU_VERNEED) continue;
		const strtab = section(s.link).offset;
		// Elf_Verneed: vn_version u16, vn_cnt u16, vn_file u32, vn_aux u32, vn_next u32.
		// Elf_Vernaux: vna_hash u32, vna_flags u16, vna_other u16, vna_name u32, vna_next u32.
		let vn = s.offset;
		for (let n = 0; n < s.info; n++) {
			const entry = { file: cstring(strtab + u32(vn + 4)), versions: [] };
			let aux = vn + u32(vn + 8);
			for (let k = 0; k < u16(vn + 2); k++) {
				entry.versions.push(cstring(strtab + u32(aux + 8)));
				aux += u32(aux + 12);
			}
			needs.push(entry);
			const next = u32(vn + 12);
			if (next === 0) break;
			vn += next;
		}
	}
	return needs;
}

const parse = (v) => v.split(".").map(Number);
const compare = (a, b) => {
	const [x, y] = [parse(a), parse(b)];
	for (let i = 0; i < Math.max(x.length, y.length); i++) {
		const d = (x[i] ?? 0) - (y[i] ?? 0);
		if (d) return d;
	}
	return 0;
};
const highest = (versions) => versions.reduce((max, v) => (max === null || compare(v, max) > 0 ? v : max), null);
const glibcVersions = (names) => names.filter((n) => /^GLIBC_\d+(\.\d+)*$/.test(n)).map((n) => n.slice(6));

/** What readelf says, or null if it is not installed. */
function readelfGlibc(file) {
	let out;
	try {
		out = execFileSync("readelf", ["--version-info", "--wide", file], {
			encoding: "utf8",
			stdio: ["ignore", "pipe", "ignore"],
		});
	} catch {
		return null;
	}
	return highest([...out.matchAll(/Name: GLIBC_(\d+(?:\.\d+)*)/g)].map((m) => m[1]));
}

function main() {
	const platform = hostPlatform();
	if (!process.argv[2] && !platform.endsWith("-gnu")) {
		console.log(`check-glibc: ${platform} does not link against glibc, nothing to check`);
		return;
	}
	const name = `${BINARY_NAME}.${platform}.node`;
	const candidates = process.argv[2] ? [process.argv[2]] : [join(root, "npm", platform, name), join(root, name)];
	const file = candidates.find((f) => existsSync(f));
	if (!file) {
		console.error(
			`check-glibc: no built addon (looked for ${candidates.map((f) => relative(root, f)).join(", ")}); run \`npm run build\``,
		);
		process.exit(1);
	}
	const needs = elfVersionNeeds(readFileSync(file));
	const versions = glibcVersions(needs.flatMap((n) => n.versions));
	const max = highest(versions);
	const fromReadelf = readelfGlibc(file);
	if (fromReadelf !== null && fromReadelf !== max) {
		console.error(`check-glibc: readelf says GLIBC_${fromReadelf}, the ELF parser says GLIBC_${max}`);
		process.exit(1);
	}
	const libs = needs.map((n) => `${n.file} (${n.versions.length})`).join(", ");
	const shown = relative(root, file) || file;
	console.log(
		`check-glibc: ${shown} needs glibc ${max ?? "(none)"} at most` +
			` [limit ${LIMIT}; version needs from ${libs || "no library"}${fromReadelf !== null ? "; readelf agrees" : ""}]`,
	);
	if (max !== null && compare(max, LIMIT) > 0) {
		const symbols = versions.filter((v) => compare(v, LIMIT) > 0).sort(compare);
		console.error(
			`check-glibc: ${shown} needs GLIBC_${max} (${[...new Set(symbols)].map((v) => `GLIBC_${v}`).join(", ")} > ${LIMIT}); ` +
				"build the release with `npm run build`, which links against glibc 2.17 (see scripts/build.mjs)",
		);
		process.exit(1);
	}
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) main();
