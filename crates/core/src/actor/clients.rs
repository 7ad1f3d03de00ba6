//! The connections part of the context: the live connections, the sending
//! end of the task's traffic queue, and the connections that ended whose
//! `onDisconnect` the task has yet to run.

use std::sync::Mutex;

use tokio::sync::{mpsc, Notify};

use super::commands::DispatchCommand;
use super::conn::{Conn, Connections};

pub struct Clients {
    conns: Connections,
    /// The task's traffic queue (bounded by the actor's
    /// `dispatch_queue_capacity`), for connections the context connects itself.
    traffic: mpsc::Sender<DispatchCommand>,
    /// Not a bounded queue, and need not be: a connection is removed once,
    /// so it holds at most one entry per connection of this generation.
    ended: Mutex<Vec<Conn>>,
    ended_changed: Notify,
}

/// The task's end of a generation's traffic queue, handed out with the
/// context that sends into it.
pub struct Inbox(mpsc::Receiver<DispatchCommand>);

impl Inbox {
    pub(crate) fn into_receiver(self) -> mpsc::Receiver<DispatchCommand> {
        self.0
    }
}

impl Clients {
    pub fn new(capacity: usize) -> (Self, Inbox) {
        let (traffic, inbox) = mpsc::channel(capacity.max(1));
        let clients =
            Self { conns: Connections::default(), traffic, ended: Mutex::default(), ended_changed: Notify::new() };
        (clients, Inbox(inbox))
    }

    pub fn conns(&self) -> &Connections {
        &self.conns
    }

    pub(crate) fn traffic(&self) -> &mpsc::Sender<DispatchCommand> {
        &self.traffic
    }

    /// Hands `conn`'s `onDisconnect` to the task.
    pub(crate) fn push_ended(&self, conn: Conn) {
        self.ended.lock().unwrap_or_else(|p| p.into_inner()).push(conn);
        self.ended_changed.notify_one();
    }

    /// Connections whose `onDisconnect` is due (the task takes them).
    pub(crate) fn take_ended(&self) -> Vec<Conn> {
        std::mem::take(&mut *self.ended.lock().unwrap_or_else(|p| p.into_inner()))
    }

    pub(crate) async fn ended_changed(&self) {
        self.ended_changed.notified().await
    }
}
