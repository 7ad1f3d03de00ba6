// Latency statistics and plain-text tables.

/** The `p`-th percentile (0–100) of sorted `values`, nearest-rank. */
export function percentile(sorted, p) {
	if (sorted.length === 0) return Number.NaN;
	const rank = Math.ceil((p / 100) * sorted.length);
	return sorted[Math.min(sorted.length, Math.max(1, rank)) - 1];
}

/** `{count, p50, p90, p99, max, mean}` of latencies in ms. */
export function summarize(latencies) {
	const sorted = [...latencies].sort((a, b) => a - b);
	const mean = sorted.reduce((sum, v) => sum + v, 0) / (sorted.length || 1);
	return {
		count: sorted.length,
		p50: percentile(sorted, 50),
		p90: percentile(sorted, 90),
		p99: percentile(sorted, 99),
		max: sorted[sorted.length - 1] ?? Number.NaN,
		mean,
	};
}

/** `value` with `digits` decimals, or "-" when not a finite number. */
export function fmt(value, digits = 1) {
	return Number.isFinite(value) ? value.toFixed(digits) : "-";
}

/** A table with a header row; numbers right-aligned, text left-aligned. */
export function table(columns, rows) {
	const cells = [columns, ...rows.map((row) => columns.map((c) => String(row[c] ?? "")))];
	const widths = columns.map((_, i) => Math.max(...cells.map((r) => String(r[i]).length)));
	const line = (r) =>
		r
			.map((cell, i) => {
				const text = String(cell);
				return i === 0 ? text.padEnd(widths[i]) : text.padStart(widths[i]);
			})
			.join("  ");
	const rule = widths.map((w) => "-".repeat(w)).join("  ");
	return [line(cells[0]), rule, ...cells.slice(1).map(line)].join("\n");
}
