//! rivetkit-native patch: HTTP answers that may have died with their
//! connection, sent again on the next one.
//!
//! The gateway that waits for an answer is not on the connection: it reads
//! the answer from the engine's pub/sub, whichever engine node the envoy's
//! socket ends on. When that node dies, the frames written to its socket
//! in its last moments are lost, and a request whose answer was among them
//! waited in the gateway until the actor stopped (about 30 s in the cluster
//! test, docs/deploy.md "A node is lost").
//!
//! So every complete, single-frame answer (a `ResponseStart` that is not a
//! stream) is kept here until the engine is proven to have read it: the
//! lease's probes (`crate::lease`) prove that the engine read everything
//! written before them. When the connection breaks (a reset, an error, a
//! node that went silent, or a node shutting down: `ws.going_away`), the
//! answers it has not proven are sent again on the next connection; the
//! gateway drops an answer for a request it has finished. When the engine
//! closes the connection for another reason (`ws.timed_out` after a healed
//! partition that held our bytes), it read the stream up to its close and
//! nothing is sent again: copies could only reach requests already
//! answered, and the gateway fails a request that gets a second answer
//! while it is still finishing it. Streamed answers are not kept: a chunk
//! sent twice would corrupt the body.

use std::collections::VecDeque;
use std::sync::Mutex;

use rivet_envoy_protocol as protocol;

/// At most this many answers are kept; the oldest goes first (it is the
/// most likely to have been read).
const MAX_KEPT: usize = 1024;
/// At most this many body bytes are kept in all.
const MAX_KEPT_BYTES: usize = 4 * 1024 * 1024;
/// A larger answer is not kept.
const MAX_ANSWER_BYTES: usize = 256 * 1024;

struct Kept {
	session: u64,
	/// Local epoch ms once the socket's writer took the frame.
	written_ms: i64,
	bytes: usize,
	message: protocol::ToRivetTunnelMessage,
}

#[derive(Default)]
pub struct ResponseReplay {
	kept: Mutex<(VecDeque<Kept>, usize)>,
}

/// Whether `message` is an answer complete in one frame.
pub fn replayable(message: &protocol::ToRivetTunnelMessage) -> bool {
	matches!(
		&message.message_kind,
		protocol::ToRivetTunnelMessageKind::ToRivetResponseStart(start)
			if !start.stream && start.body.as_ref().map_or(0, Vec::len) <= MAX_ANSWER_BYTES
	)
}

fn body_len(message: &protocol::ToRivetTunnelMessage) -> usize {
	match &message.message_kind {
		protocol::ToRivetTunnelMessageKind::ToRivetResponseStart(start) => {
			start.body.as_ref().map_or(0, Vec::len)
		}
		_ => 0,
	}
}

impl ResponseReplay {
	/// `message` was written on `session` at `written_ms`; everything written
	/// before `proven_ms` has been read by the engine and is forgotten.
	pub fn kept(
		&self,
		session: u64,
		written_ms: i64,
		proven_ms: i64,
		message: protocol::ToRivetTunnelMessage,
	) {
		let mut guard = self.kept.lock().unwrap_or_else(|e| e.into_inner());
		let (kept, bytes) = &mut *guard;
		while kept
			.front()
			.is_some_and(|k| k.session == session && k.written_ms < proven_ms)
		{
			*bytes -= kept.pop_front().map_or(0, |k| k.bytes);
		}
		let size = body_len(&message);
		kept.push_back(Kept {
			session,
			written_ms,
			bytes: size,
			message,
		});
		*bytes += size;
		while kept.len() > MAX_KEPT || *bytes > MAX_KEPT_BYTES {
			*bytes -= kept.pop_front().map_or(0, |k| k.bytes);
		}
	}

	/// `session` ended in a way that delivered what it carried: nothing of
	/// it is sent again.
	pub fn forget(&self, session: u64) {
		let _ = self.unproven(session, i64::MAX);
	}

	/// `session` ended: the answers written on it that the engine is not
	/// proven (by `proven_ms`) to have read, in the order they were written.
	pub fn unproven(&self, session: u64, proven_ms: i64) -> Vec<protocol::ToRivetTunnelMessage> {
		let mut guard = self.kept.lock().unwrap_or_else(|e| e.into_inner());
		let (kept, bytes) = &mut *guard;
		let mut out = Vec::new();
		kept.retain(|k| {
			if k.session != session {
				return true;
			}
			*bytes -= k.bytes;
			if k.written_ms >= proven_ms {
				out.push(k.message.clone());
			}
			false
		});
		out
	}
}

#[cfg(test)]
mod tests {
	use super::*;

	fn answer(request: u8, body: usize, stream: bool) -> protocol::ToRivetTunnelMessage {
		protocol::ToRivetTunnelMessage {
			message_id: protocol::MessageId {
				gateway_id: [1; 4],
				request_id: [request; 4],
				message_index: 0,
			},
			message_kind: protocol::ToRivetTunnelMessageKind::ToRivetResponseStart(
				protocol::ToRivetResponseStart {
					status: 200,
					headers: Default::default(),
					body: Some(vec![0; body]),
					stream,
				},
			),
		}
	}

	#[test]
	fn only_answers_complete_in_one_small_frame_are_kept() {
		assert!(replayable(&answer(1, 10, false)));
		assert!(!replayable(&answer(1, 10, true)));
		assert!(!replayable(&answer(1, MAX_ANSWER_BYTES + 1, false)));
	}

	#[test]
	fn a_closed_session_gives_back_what_was_written_after_the_last_proof() {
		let replay = ResponseReplay::default();
		replay.kept(1, 100, 0, answer(1, 10, false));
		replay.kept(1, 200, 0, answer(2, 10, false));
		replay.kept(2, 250, 0, answer(9, 10, false));
		// A proof at 150 forgets the first answer.
		replay.kept(1, 300, 150, answer(3, 10, false));
		let ids: Vec<u8> = replay
			.unproven(1, 250)
			.iter()
			.map(|m| m.message_id.request_id[0])
			.collect();
		assert_eq!(ids, [3]);
		// The session's answers are gone; the other session's stay.
		assert!(replay.unproven(1, 0).is_empty());
		assert_eq!(replay.unproven(2, 0).len(), 1);
		assert_eq!(replay.kept.lock().unwrap().1, 0);
	}

	#[test]
	fn a_whole_stream_gives_nothing_back() {
		let replay = ResponseReplay::default();
		replay.kept(1, 100, 0, answer(1, 10, false));
		replay.forget(1);
		assert!(replay.unproven(1, 0).is_empty());
		assert_eq!(replay.kept.lock().unwrap().1, 0);
	}

	#[test]
	fn the_oldest_answers_go_first_past_the_bounds() {
		let replay = ResponseReplay::default();
		for i in 0..(MAX_KEPT + 5) {
			replay.kept(1, i as i64, 0, answer((i % 256) as u8, 1, false));
		}
		assert_eq!(replay.unproven(1, 0).len(), MAX_KEPT);
	}
}
