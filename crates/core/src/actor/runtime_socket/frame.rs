//! Framing on the socket: each payload is preceded by its length, a
//! big-endian `u32`. A length above the connection's limit is refused
//! before anything is allocated for it (docs/runtime-socket.md, "Limits").

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Largest payload accepted and sent by default (32 MiB).
pub const DEFAULT_MAX_FRAME_BYTES: u32 = 32 * 1024 * 1024;

/// The smallest limit the environment may set.
pub const MIN_MAX_FRAME_BYTES: u32 = 1024;

/// Environment variable overriding [`DEFAULT_MAX_FRAME_BYTES`].
pub const MAX_FRAME_BYTES_ENV: &str = crate::env::RIVET_ACTOR_RUNTIME_SOCKET_MAX_FRAME_BYTES;

/// The frame limit of this process: the environment's if it is a number
/// of at least [`MIN_MAX_FRAME_BYTES`], else the default (with a warning).
pub fn configured_max_frame_bytes() -> u32 {
    parse_max_frame_bytes(crate::env::get(MAX_FRAME_BYTES_ENV).as_deref())
}

pub(crate) fn parse_max_frame_bytes(value: Option<&str>) -> u32 {
    let Some(value) = value else {
        return DEFAULT_MAX_FRAME_BYTES;
    };
    match value.trim().parse::<u32>() {
        Ok(n) if n >= MIN_MAX_FRAME_BYTES => n,
        _ => {
            tracing::warn!(
                value,
                default = DEFAULT_MAX_FRAME_BYTES,
                "{MAX_FRAME_BYTES_ENV} is not a number of at least {MIN_MAX_FRAME_BYTES}; using the default"
            );
            DEFAULT_MAX_FRAME_BYTES
        }
    }
}

/// One frame read from the peer.
#[derive(Debug)]
pub enum Frame {
    Payload(Vec<u8>),
    /// Its announced length is above the limit (its bytes were not read).
    TooLarge,
}

/// Reads the next frame; `Ok(None)` when the peer closed between frames.
pub async fn read_frame<R: AsyncRead + Unpin>(reader: &mut R, max: u32) -> std::io::Result<Option<Frame>> {
    let mut head = [0u8; 4];
    let mut got = 0;
    while got < head.len() {
        let n = reader.read(&mut head[got..]).await?;
        if n == 0 {
            return if got == 0 { Ok(None) } else { Err(std::io::ErrorKind::UnexpectedEof.into()) };
        }
        got += n;
    }
    let length = u32::from_be_bytes(head);
    if length > max {
        return Ok(Some(Frame::TooLarge));
    }
    let mut payload = vec![0; length as usize];
    reader.read_exact(&mut payload).await?;
    Ok(Some(Frame::Payload(payload)))
}

/// Writes one frame and flushes it.
pub async fn write_frame<W: AsyncWrite + Unpin>(writer: &mut W, payload: &[u8]) -> std::io::Result<()> {
    let length = u32::try_from(payload.len()).map_err(|_| std::io::Error::other("frame longer than 4 GiB"))?;
    writer.write_all(&length.to_be_bytes()).await?;
    writer.write_all(payload).await?;
    writer.flush().await
}
