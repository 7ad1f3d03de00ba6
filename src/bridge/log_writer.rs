//! Where log lines go: stderr, written so that logging can never take the
//! process down.
//!
//! Node puts a piped stderr in non-blocking mode. When the reader of that
//! pipe falls behind, a write fails with `EAGAIN`; `tracing-subscriber`'s
//! own stderr writer then reports the failure with `eprintln!`, which
//! panics on the same error, and the panic hook's log line fails again: a
//! panic inside a panic, and the process aborts. (Seen: a host whose parent
//! read its stderr slowly aborted in the middle of a drain.)
//!
//! Here a line is written whole when the pipe has room; when it has none,
//! the writer waits for room at most [`STALL_BUDGET`] per line, then drops
//! the line and counts it. The next line that gets through is preceded by
//! a warning with the count, in the subscriber's format. Any other error
//! (a closed stderr) drops the line quietly. Nothing here panics.
//!
//! Why wait at all instead of dropping at once: a reader that is only a
//! little slow (a test harness, a terminal) should lose nothing, and the
//! wait is bounded, so a stalled reader costs a worker thread at most
//! [`STALL_BUDGET`] per line.

use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tracing_subscriber::fmt::MakeWriter;

/// How long one line may wait for room in stderr before it is dropped.
pub const STALL_BUDGET: Duration = Duration::from_millis(100);

/// Lines dropped since the last report.
static DROPPED: AtomicU64 = AtomicU64::new(0);
/// Whether the subscriber writes JSON (the report follows suit).
static JSON: AtomicBool = AtomicBool::new(false);

/// The subscriber's writer: stderr through [`emit_line`].
#[derive(Clone, Copy, Default)]
pub struct StderrLines;

impl StderrLines {
    pub fn new(json: bool) -> Self {
        JSON.store(json, Ordering::Relaxed);
        Self
    }
}

impl<'a> MakeWriter<'a> for StderrLines {
    type Writer = LineWriter;

    fn make_writer(&'a self) -> Self::Writer {
        LineWriter
    }
}

/// Receives one formatted event (the subscriber writes each event with
/// one `write_all`). Reports every byte written, whatever happened to it:
/// a logging failure is never an error for the code that logged.
pub struct LineWriter;

impl Write for LineWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        emit_line(&mut Stderr, buf, STALL_BUDGET);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Something lines are written to, and a way to wait until it has room.
pub trait Sink {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize>;
    /// Waits at most `timeout` until a write may make progress.
    fn wait_writable(&mut self, timeout: Duration);
}

struct Stderr;

impl Sink for Stderr {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        io::stderr().write(buf)
    }

    fn wait_writable(&mut self, timeout: Duration) {
        wait_fd_writable(2, timeout);
    }
}

/// Waits until `fd` accepts a write, at most `timeout`.
#[cfg(unix)]
pub fn wait_fd_writable(fd: i32, timeout: Duration) {
    let mut pollfd = libc::pollfd { fd, events: libc::POLLOUT, revents: 0 };
    let ms = timeout.as_millis().clamp(1, i32::MAX as u128) as i32;
    // SAFETY: one valid pollfd, for the duration of the call.
    unsafe {
        libc::poll(&mut pollfd, 1, ms);
    }
}

#[cfg(not(unix))]
pub fn wait_fd_writable(_fd: i32, timeout: Duration) {
    std::thread::sleep(timeout.min(Duration::from_millis(1)));
}

/// Writes the report of dropped lines (if any), then `line`. Returns
/// whether `line` was written whole.
pub fn emit_line(sink: &mut dyn Sink, line: &[u8], budget: Duration) -> bool {
    let dropped = DROPPED.swap(0, Ordering::AcqRel);
    if dropped > 0 && !emit(sink, dropped_report(dropped).as_bytes(), budget) {
        DROPPED.fetch_add(dropped, Ordering::AcqRel);
    }
    let written = emit(sink, line, budget);
    if !written {
        DROPPED.fetch_add(1, Ordering::AcqRel);
    }
    written
}

/// The warning written before the next line that gets through.
fn dropped_report(count: u64) -> String {
    if JSON.load(Ordering::Relaxed) {
        format!(
            "{{\"level\":\"WARN\",\"target\":\"rivetkit_native::logging\",\"message\":\"log lines were dropped: stderr was not read fast enough\",\"dropped\":{count}}}\n"
        )
    } else {
        format!(" WARN rivetkit_native::logging: {count} log lines were dropped: stderr was not read fast enough\n")
    }
}

/// Writes `buf` whole, waiting for room at most `budget` in all.
fn emit(sink: &mut dyn Sink, mut buf: &[u8], budget: Duration) -> bool {
    let deadline = Instant::now() + budget;
    while !buf.is_empty() {
        match sink.write(buf) {
            Ok(0) => return false,
            Ok(n) => buf = &buf[n.min(buf.len())..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                let now = Instant::now();
                if now >= deadline {
                    return false;
                }
                sink.wait_writable(deadline - now);
            }
            Err(_) => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pipe whose write end is non-blocking, as Node leaves a piped stderr.
    struct Pipe {
        read: i32,
        write: i32,
    }

    impl Pipe {
        fn new() -> Self {
            let mut fds = [0; 2];
            // SAFETY: two ints for the two ends.
            assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
            // SAFETY: our own fd.
            unsafe {
                let flags = libc::fcntl(fds[1], libc::F_GETFL);
                libc::fcntl(fds[1], libc::F_SETFL, flags | libc::O_NONBLOCK);
            }
            Self { read: fds[0], write: fds[1] }
        }

        /// Fills the pipe until a write would block.
        fn fill(&mut self) {
            let chunk = [b'x'; 4096];
            // SAFETY: a valid buffer and our own fd.
            while unsafe { libc::write(self.write, chunk.as_ptr().cast(), chunk.len()) } > 0 {}
        }

        /// Reads everything there is (the write end stays open).
        fn drain(&mut self) -> Vec<u8> {
            // SAFETY: our own fd.
            unsafe {
                let flags = libc::fcntl(self.read, libc::F_GETFL);
                libc::fcntl(self.read, libc::F_SETFL, flags | libc::O_NONBLOCK);
            }
            let mut out = Vec::new();
            let mut buf = [0u8; 65536];
            loop {
                // SAFETY: a valid buffer and our own fd.
                let n = unsafe { libc::read(self.read, buf.as_mut_ptr().cast(), buf.len()) };
                if n <= 0 {
                    break;
                }
                out.extend_from_slice(&buf[..n as usize]);
            }
            out
        }
    }

    impl Sink for Pipe {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            // SAFETY: a valid buffer and our own fd.
            let n = unsafe { libc::write(self.write, buf.as_ptr().cast(), buf.len()) };
            if n < 0 {
                Err(io::Error::last_os_error())
            } else {
                Ok(n as usize)
            }
        }

        fn wait_writable(&mut self, timeout: Duration) {
            wait_fd_writable(self.write, timeout);
        }
    }

    impl Drop for Pipe {
        fn drop(&mut self) {
            // SAFETY: our own fds, closed once.
            unsafe {
                if self.read >= 0 {
                    libc::close(self.read);
                }
                libc::close(self.write);
            }
        }
    }

    // One test: the dropped count is process-wide.
    #[test]
    fn a_full_pipe_drops_lines_without_panicking_and_the_next_line_reports_them() {
        let mut pipe = Pipe::new();
        assert!(emit_line(&mut pipe, b"first\n", Duration::from_millis(10)));
        assert_eq!(pipe.drain(), b"first\n");

        pipe.fill();
        let started = Instant::now();
        assert!(!emit_line(&mut pipe, b"lost one\n", Duration::from_millis(20)));
        assert!(!emit_line(&mut pipe, b"lost two\n", Duration::from_millis(20)));
        assert!(started.elapsed() < Duration::from_secs(2), "each wait is bounded");

        pipe.drain();
        assert!(emit_line(&mut pipe, b"after\n", Duration::from_millis(10)));
        let text = String::from_utf8(pipe.drain()).unwrap();
        assert_eq!(
            text,
            " WARN rivetkit_native::logging: 2 log lines were dropped: stderr was not read fast enough\nafter\n"
        );

        // A closed reader: the write fails (EPIPE, SIGPIPE is ignored by
        // Node and by the Rust test harness) and the line is dropped quietly.
        // SAFETY: our own fd, marked closed for the Drop.
        unsafe { libc::close(pipe.read) };
        pipe.read = -1;
        assert!(!emit_line(&mut pipe, b"nobody reads\n", Duration::from_millis(10)));
        DROPPED.store(0, Ordering::Release);
    }
}
