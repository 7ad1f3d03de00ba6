use std::sync::Arc;
use std::sync::atomic::Ordering;

use futures_util::{SinkExt, StreamExt};
use rivet_envoy_protocol as protocol;
use tokio::sync::{Semaphore, mpsc, oneshot};
use tokio_tungstenite::tungstenite;
use tracing::Instrument;
use vbare::OwnedVersionedData;

use crate::context::{HttpWsTxMessage, SharedContext, WsTxMessage};
use crate::envoy::ToEnvoyMessage;
use crate::handle::EnvoyHandle;
use crate::metrics::METRICS;
use crate::utils::{BackoffOptions, calculate_backoff, parse_ws_close_reason};

const STABLE_CONNECTION_MS: u64 = 60_000;
/// rivetkit-native patch: at most this many queued frames per write.
const WRITE_BATCH: usize = 64;

pub fn start_connection(shared: Arc<SharedContext>) {
	let span = tracing::debug_span!("envoy_connection", envoy_key = %shared.envoy_key);
	tokio::spawn(connection_loop(shared).instrument(span));
}

pub(super) fn websocket_config() -> tungstenite::protocol::WebSocketConfig {
	tungstenite::protocol::WebSocketConfig::default()
		.max_message_size(None)
		.max_frame_size(None)
}

/// rivetkit-native patch: with more than one engine node, the next node is
/// tried this soon after a connection ends or fails; the back-off applies
/// once every node has been tried (docs/deploy.md, "A node is lost").
const FAILOVER_DELAY_MS: u64 = 10;

async fn connection_loop(shared: Arc<SharedContext>) {
	let mut attempt = 0u32;
	let endpoints: Vec<String> = super::endpoints(&shared)
		.into_iter()
		.map(str::to_owned)
		.collect();
	// rivetkit-native patch: which node is used now, and how many in a row
	// have been tried since one last held a connection for a while.
	let mut current = 0usize;
	let mut tried = 0usize;

	loop {
		if shared.shutting_down.load(Ordering::Acquire) {
			tracing::debug!("stopping reconnect loop because envoy is shutting down");
			return;
		}

		let connected_at = std::time::Instant::now();
		let key_epoch = shared.envoy_key.epoch();
		// rivetkit-native patch: the engine's retry hint, if it shed us.
		let mut retry_after_ms = None;

		match single_connection(&shared, &endpoints[current]).await {
			Ok((session, close_reason)) => {
				retry_after_ms = close_reason.as_ref().and_then(|r| r.retry_after_ms);
				// rivetkit-native patch: an eviction ends the envoy only when
				// it is shutting down. The published crate took every eviction
				// for another process owning this envoy key and gave up for
				// good, leaving the host running with no connection. Our keys
				// are per process: an eviction here is the engine settling two
				// connections of this one envoy (one dropped as idle while a
				// cluster-wide stall held its registration, docs/deploy.md), so
				// the envoy connects again.
				if let Some(reason) = &close_reason {
					// rivetkit-native patch: engine 3.0 closes with
					// `pool.not_found` when the pool does not exist. Only an
					// operator can create it, so the envoy gives up and says
					// why (as the published 3.0 client does).
					if reason.group == "pool" && reason.error == "not_found" {
						let why = format!(
							"pool.not_found: the engine has no pool '{}' in namespace '{}'",
							shared.config.pool_name, shared.config.namespace
						);
						tracing::error!(
							"{why}; the envoy stops (create the pool with PUT /pools/{{pool}})"
						);
						*shared.fatal.lock().unwrap_or_else(|p| p.into_inner()) = Some(why);
						shared.shutting_down.store(true, Ordering::Release);
						let _ = crate::envoy::send_to_envoy_tx(
							&shared,
							ToEnvoyMessage::ConnClose {
								evict: true,
								session,
							},
						);
						return;
					}
					let evicted = reason.group == "ws" && reason.error == "eviction";
					if evicted && !shared.shutting_down.load(Ordering::Acquire) {
						tracing::warn!("the engine evicted this connection: connecting again");
					} else if evicted {
						tracing::debug!("connection evicted");
						let _ = crate::envoy::send_to_envoy_tx(
							&shared,
							ToEnvoyMessage::ConnClose {
								evict: true,
								session,
							},
						);
						return;
					}
				}
				let _ = crate::envoy::send_to_envoy_tx(
					&shared,
					ToEnvoyMessage::ConnClose {
						evict: false,
						session,
					},
				);
			}
			Err(error) => {
				tracing::error!(?error, "connection failed");
				let session = shared.connection_session.load(Ordering::Acquire);
				if session != 0 {
					super::remove_connection_for_session(&shared, session).await;
				}
				let _ = crate::envoy::send_to_envoy_tx(
					&shared,
					ToEnvoyMessage::ConnClose {
						evict: false,
						session,
					},
				);
			}
		}

		if connected_at.elapsed().as_millis() >= STABLE_CONNECTION_MS as u128 {
			attempt = 0;
		}
		// A connection that lasted past a reconnect delay counts as a node
		// that worked: the next failure starts a fresh round of nodes.
		if connected_at.elapsed() >= calculate_backoff(0, &no_jitter()) {
			tried = 0;
		}

		if shared.shutting_down.load(Ordering::Acquire) {
			tracing::debug!("skipping reconnect because envoy is shutting down");
			return;
		}

		// rivetkit-native patch (`crate::envoy_key`): a connection left
		// because the key was replaced after a fence, not because the node
		// failed: the new key connects at once, to the same node.
		if shared.envoy_key.epoch() != key_epoch {
			tracing::info!(endpoint = %endpoints[current], "connecting under the new envoy key");
			continue;
		}

		tried += 1;
		if endpoints.len() > 1 && tried < endpoints.len() {
			current = (current + 1) % endpoints.len();
			tracing::warn!(endpoint = %endpoints[current], "engine node lost: reconnecting to another one");
			tokio::time::sleep(std::time::Duration::from_millis(FAILOVER_DELAY_MS)).await;
			continue;
		}
		tried = 0;
		current = (current + 1) % endpoints.len();

		let delay = crate::utils::reconnect_delay(attempt, retry_after_ms);
		tracing::info!(attempt, delay_ms = delay.as_millis() as u64, endpoint = %endpoints[current], "reconnecting");
		tokio::time::sleep(delay).await;
		attempt += 1;
	}
}

fn no_jitter() -> BackoffOptions {
	BackoffOptions {
		jitter: false,
		..BackoffOptions::default()
	}
}

/// rivetkit-native patch: the engine pings every envoy every few seconds;
/// after this much silence the node is checked, and left if it cannot be
/// reached (docs/deploy.md).
const READ_IDLE: std::time::Duration = std::time::Duration::from_secs(8);
/// rivetkit-native patch: a connection whose node accepts connections is
/// still given up after this much silence. A dead socket is the kernel's to
/// find ([`UNACKED_TIMEOUT`]); this bounds an engine that stays silent.
const READ_IDLE_LAST: std::time::Duration = std::time::Duration::from_secs(60);
/// rivetkit-native patch: `TCP_USER_TIMEOUT` of the envoy's socket (Linux):
/// the host answers the engine's pings every 3 s, so a path that stopped
/// carrying them is found well before the engine's 15 s lost threshold.
const UNACKED_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// rivetkit-native patch: whether `endpoint`'s host accepts a TCP connection
/// within [`REACH_TIMEOUT`]. A machine that is gone or cut off does not; an
/// engine process that is alive but stalled does (its kernel accepts).
async fn node_reachable(endpoint: String) -> bool {
	let Some(address) = host_port(&endpoint) else {
		return false;
	};
	matches!(
		tokio::time::timeout(REACH_TIMEOUT, tokio::net::TcpStream::connect(address)).await,
		Ok(Ok(_))
	)
}

const REACH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// `host:port` of an `http(s)://` endpoint, the scheme's port by default.
fn host_port(endpoint: &str) -> Option<String> {
	let (default_port, rest) = if let Some(rest) = endpoint.strip_prefix("https://") {
		(443, rest)
	} else {
		(80, endpoint.strip_prefix("http://")?)
	};
	let authority = rest.split(['/', '?', '#']).next()?;
	let authority = authority
		.rsplit_once('@')
		.map_or(authority, |(_, host)| host);
	if authority.is_empty() {
		return None;
	}
	let has_port = if authority.starts_with('[') {
		authority.contains("]:")
	} else {
		authority.contains(':')
	};
	Some(if has_port {
		authority.to_owned()
	} else {
		format!("{authority}:{default_port}")
	})
}

/// rivetkit-native patch: how long the reader waits for the engine's close
/// after ours was written.
const CLOSE_REPLY_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// rivetkit-native patch: how long a fenced connection's writer may take to
/// write what the fence queued and its close frame.
const FENCE_FLUSH_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

async fn single_connection(
	shared: &Arc<SharedContext>,
	endpoint: &str,
) -> anyhow::Result<(u64, Option<crate::utils::ParsedCloseReason>)> {
	// rivetkit-native patch: see `crate::lease`.
	shared
		.connect_started_ms
		.store(crate::time::now_millis(), Ordering::Release);
	// rivetkit-native patch: a connection lives only as long as the key it
	// was made under (`crate::envoy_key`).
	let mut key_epoch = shared.envoy_key.subscribe();
	key_epoch.mark_unchanged();
	let url = super::ws_url(shared, endpoint);
	let request = connect_request(shared, &url)?;

	// rivetkit-native patch: Nagle off on the envoy socket (`disable_nagle`),
	// and quick ACKs re-armed after every read (see `quickack`).
	let (ws_stream, _) =
		tokio_tungstenite::connect_async_with_config(request, Some(websocket_config()), true)
			.await?;
	let quickack = quickack::Rearm::of(ws_stream.get_ref());
	let (mut write, mut read) = ws_stream.split();

	// TODO: Bound shared WebSocket writer memory across protocol message types.
	// https://github.com/rivet-dev/rivet/issues/5468
	let (ws_tx, mut ws_rx) = mpsc::unbounded_channel::<WsTxMessage>();
	let (http_ws_tx, mut http_ws_rx) =
		mpsc::channel::<HttpWsTxMessage>(super::HTTP_WS_MESSAGE_CAPACITY);
	let http_byte_budget = Arc::new(Semaphore::new(super::HTTP_WS_BYTE_CAPACITY));
	let session =
		super::install_connection_with_http(shared, ws_tx, http_ws_tx, http_byte_budget).await;

	tracing::info!(
		endpoint = %endpoint,
		namespace = %shared.config.namespace,
		envoy_key = %shared.envoy_key,
		has_token = shared.config.token.is_some(),
		"websocket connected"
	);
	shared
		.config
		.callbacks
		.on_connect(EnvoyHandle::from_shared(shared.clone()));

	let session_start = std::time::Instant::now();
	let mut disconnect_reason: &'static str = "stream_end";

	// Spawn write task
	let shared2 = shared.clone();
	let write_span = tracing::debug_span!("envoy_ws_write", envoy_key = %shared2.envoy_key);
	let (write_failed_tx, mut write_failed_rx) = oneshot::channel();
	let mut write_handle = tokio::spawn(
		async move {
			let mut write_failed_tx = Some(write_failed_tx);
			super::send_initial_metadata(&shared2).await;

			// rivetkit-native patch: the frames that are queued together
			// are written together (`feed` each, one `flush`), so an action's
			// answer and its acknowledgement, sent by two tasks, leave in one
			// `send` instead of two.
			let mut written = Vec::new();
			loop {
				let msg = tokio::select! {
					msg = ws_rx.recv() => msg.map(EitherWrite::Legacy),
					msg = http_ws_rx.recv() => msg.map(EitherWrite::Http),
				};
				let Some(mut msg) = msg else { break };
				let mut fed = 0usize;
				let mut yielded = false;
				let mut legacy = false;
				let mut close = false;
				let mut failed = None;
				loop {
					legacy |= matches!(msg, EitherWrite::Legacy(_));
					match msg {
						EitherWrite::Legacy(WsTxMessage::Send(data)) => {
							if let Err(e) =
								write.feed(tungstenite::Message::Binary(data.into())).await
							{
								failed = Some(e);
							}
						}
						EitherWrite::Legacy(WsTxMessage::Close) => close = true,
						EitherWrite::Http(message) => {
							match write
								.feed(tungstenite::Message::Binary(message.data.into()))
								.await
							{
								Ok(()) => written.push(message.written),
								Err(e) => {
									let _ = message.written.send(Err(anyhow::anyhow!("{e}")));
									failed = Some(e);
								}
							}
						}
					}
					fed += 1;
					if close || failed.is_some() || fed >= WRITE_BATCH {
						break;
					}
					let next = match ws_rx.try_recv() {
						Ok(m) => Some(EitherWrite::Legacy(m)),
						Err(_) => http_ws_rx.try_recv().ok().map(EitherWrite::Http),
					};
					msg = match next {
						Some(m) => m,
						// Once per write with a WebSocket-level frame (answers,
						// acknowledgements, events): let the other tasks that
						// are ready run first (tokio resumes a yielding task when
						// the worker has nothing else to do), so that what they
						// send joins this write. HTTP frames go alone: a
						// request's frames are sent at different times.
						None if !yielded && legacy => {
							yielded = true;
							tokio::task::yield_now().await;
							let next = match ws_rx.try_recv() {
								Ok(m) => Some(EitherWrite::Legacy(m)),
								Err(_) => http_ws_rx.try_recv().ok().map(EitherWrite::Http),
							};
							match next {
								Some(m) => m,
								None => break,
							}
						}
						None => break,
					};
				}
				if failed.is_none() {
					if let Err(e) = write.flush().await {
						failed = Some(e);
					}
				}
				for tx in written.drain(..) {
					let _ = tx.send(match &failed {
						None => Ok(()),
						Some(e) => Err(anyhow::anyhow!("{e}")),
					});
				}
				if let Some(e) = failed {
					tracing::error!(?e, "failed to send ws message");
					if let Some(write_failed_tx) = write_failed_tx.take() {
						let _ = write_failed_tx.send(());
					}
					break;
				}
				if close {
					let _ = write
						.send(tungstenite::Message::Close(Some(
							tungstenite::protocol::CloseFrame {
								code: tungstenite::protocol::frame::coding::CloseCode::Normal,
								reason: "envoy.shutdown".into(),
							},
						)))
						.await;
					break;
				}
			}
		}
		.instrument(write_span),
	);

	let mut result = None;

	let debug_latency_ms = shared.config.debug_latency_ms;

	// rivetkit-native patch: once the writer has sent our close frame, the
	// reader goes on until the engine's close (or the end of the stream), at
	// most `CLOSE_REPLY_WAIT`: the engine answers a close once it has read,
	// and acted on, every frame sent before it. The published crate dropped
	// the connection as soon as our close was written.
	let mut close_deadline: Option<tokio::time::Instant> = None;
	// rivetkit-native patch: a node that died without closing the socket
	// (a machine gone, a cable cut) sends nothing more, not even its pings:
	// after `READ_IDLE` of silence the connection is given up if the node
	// cannot be reached, after `READ_IDLE_LAST` in any case, and the loop
	// reconnects (to another node when there are several).
	let idle = tokio::time::sleep(READ_IDLE);
	tokio::pin!(idle);
	let mut reach: Option<std::pin::Pin<Box<dyn std::future::Future<Output = bool> + Send>>> = None;
	let mut stayed = false;
	let mut last_frame = tokio::time::Instant::now();
	loop {
		let msg = tokio::select! {
			msg = read.next() => msg,
			_ = &mut idle, if reach.is_none() => {
				if stayed {
					// Still silent after a long while: try a new connection.
					tracing::warn!(idle_ms = READ_IDLE_LAST.as_millis() as u64, endpoint = %endpoint, "the engine is still silent: reconnecting");
					disconnect_reason = "read_idle";
					break;
				}
				reach = Some(Box::pin(node_reachable(endpoint.to_owned())));
				continue;
			}
			reachable = async { reach.as_mut().expect("guarded").await }, if reach.is_some() => {
				reach = None;
				if reachable {
					// Alive but silent: a cluster-wide stall (a dead leader's
					// lease), which leaving would only add a registration to,
					// or a partition that holds bytes, whose delivery leaving
					// would throw away. A dead socket is the kernel's to find.
					tracing::info!(idle_ms = READ_IDLE.as_millis() as u64, endpoint = %endpoint, "the engine sent nothing, but its node accepts connections: staying");
					stayed = true;
					idle.as_mut().reset(last_frame + READ_IDLE_LAST);
					continue;
				}
				tracing::warn!(idle_ms = READ_IDLE.as_millis() as u64, endpoint = %endpoint, "the engine sent nothing and its node cannot be reached: reconnecting");
				disconnect_reason = "read_idle";
				break;
			}
			_ = key_epoch.changed() => {
				tracing::warn!(envoy_key = %shared.envoy_key, "the envoy key was replaced after a fence: leaving the old key's connection");
				disconnect_reason = "fenced";
				break;
			}
			written = &mut write_failed_rx, if close_deadline.is_none() => {
				if written.is_ok() {
					disconnect_reason = "write_error";
					break;
				}
				close_deadline = Some(tokio::time::Instant::now() + CLOSE_REPLY_WAIT);
				continue;
			}
			_ = async {
				match close_deadline {
					Some(deadline) => tokio::time::sleep_until(deadline).await,
					None => std::future::pending().await,
				}
			} => {
				disconnect_reason = "close_reply_timeout";
				break;
			}
		};
		let Some(msg) = msg else { break };
		last_frame = tokio::time::Instant::now();
		stayed = false;
		idle.as_mut().reset(last_frame + READ_IDLE);
		quickack.rearm();
		match msg {
			Ok(tungstenite::Message::Binary(data)) => {
				crate::utils::inject_latency(debug_latency_ms).await;

				// Everything below runs before the next `read.next()`, so this is time the socket
				// is not being drained. A slow reader shows up here rather than in the idle wait.
				let handler_start = std::time::Instant::now();
				METRICS.ws_rx_bytes_total.inc_by(data.len() as u64);
				METRICS.ws_rx_messages_total.inc();

				let decode_start = std::time::Instant::now();
				let decoded = crate::protocol::versioned::ToEnvoy::deserialize(
					&data,
					protocol::PROTOCOL_VERSION,
				)?;
				METRICS
					.ws_decode_duration
					.observe(decode_start.elapsed().as_secs_f64());

				super::forward_to_envoy(shared, session, decoded).await;

				METRICS
					.ws_read_handler_duration
					.observe(handler_start.elapsed().as_secs_f64());
			}
			Ok(tungstenite::Message::Close(frame)) => {
				disconnect_reason = "close";
				if let Some(frame) = frame {
					let reason_str = frame.reason.to_string();
					let code: u16 = frame.code.into();
					tracing::info!(
						code,
						reason = %reason_str,
						"websocket closed"
					);
					result = parse_ws_close_reason(&reason_str);
				}
				break;
			}
			Err(e) => {
				// rivetkit-native patch: after our close, the engine may end
				// the stream without its own close frame; that is the end
				// we waited for, not an error.
				if close_deadline.is_some() {
					disconnect_reason = "closed";
					tracing::debug!(?e, "websocket ended after our close");
				} else {
					disconnect_reason = "error";
					tracing::error!(?e, "websocket error");
				}
				break;
			}
			_ => {}
		}
	}

	let session_duration = session_start.elapsed();
	METRICS
		.ws_session_duration_seconds
		.observe(session_duration.as_secs_f64());
	METRICS
		.ws_reconnect_total
		.with_label_values(&[disconnect_reason])
		.inc();
	tracing::info!(
		envoy_key = %shared.envoy_key,
		reason = disconnect_reason,
		session_duration_ms = session_duration.as_millis() as u64,
		"websocket session ended"
	);

	// Clean up
	// rivetkit-native patch (`crate::replay`): a close the engine chose
	// (other than a node shutting down) ended a stream that was whole.
	let engine_chose = disconnect_reason == "closed"
		|| (disconnect_reason == "close"
			&& !result
				.as_ref()
				.is_some_and(|r| r.group == "ws" && r.error == "going_away"));
	// A new key's connection is not authorized for the old one's requests.
	if engine_chose || disconnect_reason == "fenced" {
		shared.response_replay.forget(session);
	}
	// rivetkit-native patch: after a fence the old key's connection is
	// closed, not dropped: what the fence queued (`envoy::fence`, the
	// fenced generations' `Stopped`) is written first, then a close frame,
	// for at most `FENCE_FLUSH_WAIT`. Behind a partition they wait in the
	// socket and reach the engine with the heal.
	if disconnect_reason == "fenced" {
		let guard = shared.ws_tx.lock().await;
		if shared
			.connection_session
			.load(std::sync::atomic::Ordering::Acquire)
			== session
		{
			if let Some(tx) = guard.as_ref() {
				let _ = tx.send(WsTxMessage::Close);
			}
		}
	}
	super::remove_connection_for_session(shared, session).await;
	if disconnect_reason == "fenced"
		&& tokio::time::timeout(FENCE_FLUSH_WAIT, &mut write_handle)
			.await
			.is_err()
	{
		tracing::warn!(
			wait_ms = FENCE_FLUSH_WAIT.as_millis() as u64,
			"the old key's connection did not take the fence's last frames in time"
		);
	}
	write_handle.abort();
	shared
		.config
		.callbacks
		.on_disconnect(EnvoyHandle::from_shared(shared.clone()));

	Ok((session, result))
}

/// The WebSocket upgrade request for `url`, with the token, if any, as a
/// subprotocol.
pub(super) fn connect_request(
	shared: &SharedContext,
	url: &str,
) -> anyhow::Result<tungstenite::http::Request<()>> {
	let protocols = {
		let mut p = vec!["rivet".to_string()];
		if let Some(token) = &shared.config.token {
			p.push(format!("rivet_token.{token}"));
		}
		p
	};

	// Initialize with a default CryptoProvider for rustls
	let provider = rustls::crypto::ring::default_provider();
	if provider.install_default().is_err() {
		tracing::debug!("crypto provider already installed in this process");
	}

	let request = tungstenite::http::Request::builder()
		.uri(url)
		.header("Sec-WebSocket-Protocol", protocols.join(", "))
		.header("Connection", "Upgrade")
		.header("Upgrade", "websocket")
		.header(
			"Sec-WebSocket-Key",
			tungstenite::handshake::client::generate_key(),
		)
		.header("Sec-WebSocket-Version", "13")
		.header("Host", extract_host(url))
		.body(())
		.map_err(|e| anyhow::anyhow!("failed to build ws request: {e}"))?;
	Ok(request)
}

enum EitherWrite {
	Legacy(WsTxMessage),
	Http(HttpWsTxMessage),
}

fn extract_host(url: &str) -> String {
	url.replace("ws://", "")
		.replace("wss://", "")
		.split('/')
		.next()
		.unwrap_or("localhost")
		.to_string()
}

#[cfg(test)]
mod tests {
	use futures_util::{SinkExt, StreamExt};
	use tokio::net::TcpListener;

	use super::*;

	#[test]
	fn websocket_config_has_no_input_size_limits() {
		let config = websocket_config();

		assert_eq!(config.max_frame_size, None);
		assert_eq!(config.max_message_size, None);
	}

	#[tokio::test]
	async fn receives_frame_larger_than_default_limit() {
		const FRAME_SIZE: usize = (16 << 20) + 64 * 1024;
		const FRAME_BYTE: u8 = 0xa5;

		let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
		let addr = listener.local_addr().unwrap();
		let server = tokio::spawn(async move {
			let (stream, _) = listener.accept().await.unwrap();
			let mut websocket = tokio_tungstenite::accept_async(stream).await.unwrap();
			websocket
				.send(tungstenite::Message::Binary(
					vec![FRAME_BYTE; FRAME_SIZE].into(),
				))
				.await
				.unwrap();
		});

		let (mut client, _) = tokio_tungstenite::connect_async_with_config(
			format!("ws://{addr}"),
			Some(websocket_config()),
			false,
		)
		.await
		.unwrap();
		let message = client.next().await.unwrap().unwrap();
		let tungstenite::Message::Binary(data) = message else {
			panic!("expected a binary websocket message");
		};

		assert_eq!(data.len(), FRAME_SIZE);
		assert!(data.iter().all(|&byte| byte == FRAME_BYTE));
		server.await.unwrap();
	}
}

/// rivetkit-native patch: quick ACKs on the envoy socket.
///
/// The engine writes small frames back to back; with delayed ACKs the
/// second one can wait up to 40 ms for our ACK of the first. Linux leaves
/// quick-ACK mode on its own, so it is re-armed after each read, on this
/// connection's socket only.
mod quickack {
	use tokio_tungstenite::MaybeTlsStream;

	pub struct Rearm(#[allow(dead_code)] Option<i32>);

	impl Rearm {
		#[cfg(target_os = "linux")]
		pub fn of(stream: &MaybeTlsStream<tokio::net::TcpStream>) -> Self {
			use std::os::fd::AsRawFd;
			let fd = match stream {
				MaybeTlsStream::Plain(s) => Some(s.as_raw_fd()),
				MaybeTlsStream::Rustls(s) => Some(s.get_ref().0.as_raw_fd()),
				_ => None,
			};
			let this = Self(fd);
			this.rearm();
			if let Some(fd) = fd {
				// rivetkit-native patch: data the peer has not acknowledged
				// for this long ends the connection (the kernel's own timer,
				// about 15 minutes by default). A cable cut or a middlebox
				// that dropped the connection shows up here, while a stalled
				// engine, whose kernel still acknowledges, does not
				// (docs/deploy.md, "A node is lost").
				let ms: libc::c_uint = super::UNACKED_TIMEOUT.as_millis() as libc::c_uint;
				// SAFETY: as in `rearm`.
				unsafe {
					libc::setsockopt(
						fd,
						libc::IPPROTO_TCP,
						libc::TCP_USER_TIMEOUT,
						&ms as *const libc::c_uint as *const libc::c_void,
						std::mem::size_of::<libc::c_uint>() as libc::socklen_t,
					);
				}
			}
			this
		}

		#[cfg(not(target_os = "linux"))]
		pub fn of(_stream: &MaybeTlsStream<tokio::net::TcpStream>) -> Self {
			Self(None)
		}

		/// The socket lives as long as the connection's read half, which
		/// outlives every call (they are made from its read loop).
		pub fn rearm(&self) {
			#[cfg(target_os = "linux")]
			if let Some(fd) = self.0 {
				let on: libc::c_int = 1;
				// SAFETY: `fd` is the connection's open socket; a failure
				// (e.g. not TCP) is harmless and ignored.
				unsafe {
					libc::setsockopt(
						fd,
						libc::IPPROTO_TCP,
						libc::TCP_QUICKACK,
						&on as *const libc::c_int as *const libc::c_void,
						std::mem::size_of::<libc::c_int>() as libc::socklen_t,
					);
				}
			}
		}
	}
}

#[cfg(test)]
mod reach_tests {
	use super::*;

	#[test]
	fn host_port_of_an_endpoint() {
		assert_eq!(
			host_port("http://127.0.0.1:6420/").as_deref(),
			Some("127.0.0.1:6420")
		);
		assert_eq!(
			host_port("https://engine.example/api").as_deref(),
			Some("engine.example:443")
		);
		assert_eq!(
			host_port("http://ns:tok@engine:1").as_deref(),
			Some("engine:1")
		);
		assert_eq!(host_port("http://[::1]:7").as_deref(), Some("[::1]:7"));
		assert_eq!(host_port("http://[::1]").as_deref(), Some("[::1]:80"));
		assert_eq!(host_port("ws://x"), None);
	}

	#[tokio::test]
	async fn a_listening_node_is_reachable_and_a_closed_port_is_not() {
		let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
		let port = listener.local_addr().unwrap().port();
		assert!(node_reachable(format!("http://127.0.0.1:{port}/")).await);
		drop(listener);
		assert!(!node_reachable(format!("http://127.0.0.1:{port}/")).await);
	}
}
