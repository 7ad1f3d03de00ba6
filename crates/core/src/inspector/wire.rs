//! The inspector protocol's frames in their current version (6): BARE,
//! read and written by hand (docs/inspector.md). Older versions are
//! converted in [`super::versions`].

/// The current version.
pub const VERSION: u16 = 6;

/// A request from the inspector (`ToServerBody`), by union tag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// 0
    PatchState { state: Vec<u8> },
    /// 1
    State { id: u64 },
    /// 2
    Connections { id: u64 },
    /// 3
    Action { id: u64, name: String, args: Vec<u8> },
    /// 4
    Rpcs { id: u64 },
    /// 5
    TraceQuery { id: u64, start_ms: u64, end_ms: u64, limit: u64 },
    /// 6
    Queue { id: u64, limit: u64 },
    /// 7
    WorkflowHistory { id: u64 },
    /// 8
    WorkflowReplay { id: u64, entry_id: Option<String> },
    /// 9
    DatabaseSchema { id: u64 },
    /// 10
    DatabaseTableRows { id: u64, table: String, limit: u64, offset: u64 },
    /// 11
    Schedules { id: u64 },
    /// 12
    ScheduleHistory { id: u64, schedule_id: String, limit: u64 },
    /// 13
    ScheduleDelete { id: u64, schedule_id: String, kind: String },
}

/// Request kinds of version 6.
pub const REQUEST_KINDS: u64 = 14;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connection {
    pub id: String,
    /// CBOR.
    pub details: Vec<u8>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueMessageSummary {
    pub id: u64,
    pub name: String,
    pub created_at_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueStatus {
    pub size: u64,
    pub max_size: u64,
    pub messages: Vec<QueueMessageSummary>,
    pub truncated: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TabConfigEntry {
    pub id: String,
    pub label: Option<String>,
    pub icon: Option<String>,
    pub hidden: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    pub id: String,
    pub name: Option<String>,
    /// `at`, `cron` or `every`.
    pub kind: String,
    pub action: String,
    /// CBOR.
    pub args: Vec<u8>,
    pub next_run_at: u64,
    pub last_run_at: Option<u64>,
    pub expression: Option<String>,
    pub timezone: Option<String>,
    pub interval_ms: Option<u64>,
    pub max_history: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleError {
    pub group: String,
    pub code: String,
    pub message: String,
    /// CBOR.
    pub metadata: Option<Vec<u8>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleFire {
    pub action: String,
    pub scheduled_at: u64,
    pub fired_at: u64,
    pub finished_at: Option<u64>,
    pub result: String,
    pub error: Option<ScheduleError>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Init {
    pub connections: Vec<Connection>,
    pub state: Option<Vec<u8>>,
    pub is_state_enabled: bool,
    pub rpcs: Vec<String>,
    pub is_database_enabled: bool,
    pub queue_size: u64,
    pub workflow_history: Option<Vec<u8>>,
    pub is_workflow_enabled: bool,
    pub tab_config: Vec<TabConfigEntry>,
    pub schedules: Vec<Schedule>,
}

/// A message to the inspector (`ToClientBody`), by union tag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// 0
    State { rid: u64, state: Option<Vec<u8>>, is_state_enabled: bool },
    /// 1
    Connections { rid: u64, connections: Vec<Connection> },
    /// 2
    Action { rid: u64, output: Vec<u8> },
    /// 3
    ConnectionsUpdated { connections: Vec<Connection> },
    /// 4
    QueueUpdated { queue_size: u64 },
    /// 5
    StateUpdated { state: Vec<u8> },
    /// 6
    WorkflowHistoryUpdated { history: Vec<u8> },
    /// 7
    SchedulesUpdated { schedules: Vec<Schedule> },
    /// 8
    Rpcs { rid: u64, rpcs: Vec<String> },
    /// 9
    TraceQuery { rid: u64, payload: Vec<u8> },
    /// 10
    Queue { rid: u64, status: QueueStatus },
    /// 11
    WorkflowHistory { rid: u64, history: Option<Vec<u8>>, is_workflow_enabled: bool },
    /// 12
    WorkflowReplay { rid: u64, history: Option<Vec<u8>>, is_workflow_enabled: bool },
    /// 13
    Schedules { rid: u64, schedules: Vec<Schedule> },
    /// 14
    ScheduleHistory { rid: u64, schedule_id: String, history: Vec<ScheduleFire> },
    /// 15
    ScheduleDelete { rid: u64, schedule_id: String, deleted: bool },
    /// 16
    Error { message: String },
    /// 17
    Init(Box<Init>),
    /// 18
    DatabaseSchema { rid: u64, schema: Vec<u8> },
    /// 19
    DatabaseTableRows { rid: u64, result: Vec<u8> },
}

// --- reading ---------------------------------------------------------------

pub(super) struct Reader<'a>(pub(super) &'a [u8]);

impl Reader<'_> {
    pub(super) fn uint(&mut self) -> anyhow::Result<u64> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let (&byte, rest) = self.0.split_first().ok_or_else(|| anyhow::anyhow!("truncated uint"))?;
            self.0 = rest;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        anyhow::bail!("uint too long")
    }

    fn data(&mut self) -> anyhow::Result<Vec<u8>> {
        let len = usize::try_from(self.uint()?)?;
        anyhow::ensure!(len <= self.0.len(), "truncated data");
        let (head, rest) = self.0.split_at(len);
        self.0 = rest;
        Ok(head.to_vec())
    }

    fn str(&mut self) -> anyhow::Result<String> {
        Ok(String::from_utf8(self.data()?)?)
    }

    fn bool(&mut self) -> anyhow::Result<bool> {
        let (&byte, rest) = self.0.split_first().ok_or_else(|| anyhow::anyhow!("truncated bool"))?;
        self.0 = rest;
        match byte {
            0 | 1 => Ok(byte == 1),
            b => anyhow::bail!("invalid bool {b}"),
        }
    }

    fn opt<T>(&mut self, read: impl FnOnce(&mut Self) -> anyhow::Result<T>) -> anyhow::Result<Option<T>> {
        if self.bool()? {
            read(self).map(Some)
        } else {
            Ok(None)
        }
    }

    fn list<T>(&mut self, mut read: impl FnMut(&mut Self) -> anyhow::Result<T>) -> anyhow::Result<Vec<T>> {
        let len = self.uint()?;
        // Every element takes at least one byte: a length past the frame is a lie.
        anyhow::ensure!(len <= self.0.len() as u64, "list longer than the frame");
        (0..len).map(|_| read(self)).collect()
    }

    fn end(&self) -> anyhow::Result<()> {
        anyhow::ensure!(self.0.is_empty(), "{} trailing bytes", self.0.len());
        Ok(())
    }
}

/// Reads one version 6 request frame.
pub fn decode_request(bytes: &[u8]) -> anyhow::Result<Request> {
    let mut r = Reader(bytes);
    let tag = r.uint()?;
    let request = match tag {
        0 => Request::PatchState { state: r.data()? },
        1 => Request::State { id: r.uint()? },
        2 => Request::Connections { id: r.uint()? },
        3 => Request::Action { id: r.uint()?, name: r.str()?, args: r.data()? },
        4 => Request::Rpcs { id: r.uint()? },
        5 => Request::TraceQuery { id: r.uint()?, start_ms: r.uint()?, end_ms: r.uint()?, limit: r.uint()? },
        6 => Request::Queue { id: r.uint()?, limit: r.uint()? },
        7 => Request::WorkflowHistory { id: r.uint()? },
        8 => Request::WorkflowReplay { id: r.uint()?, entry_id: r.opt(Reader::str)? },
        9 => Request::DatabaseSchema { id: r.uint()? },
        10 => Request::DatabaseTableRows { id: r.uint()?, table: r.str()?, limit: r.uint()?, offset: r.uint()? },
        11 => Request::Schedules { id: r.uint()? },
        12 => Request::ScheduleHistory { id: r.uint()?, schedule_id: r.str()?, limit: r.uint()? },
        13 => Request::ScheduleDelete { id: r.uint()?, schedule_id: r.str()?, kind: r.str()? },
        tag => anyhow::bail!("unknown request kind {tag}"),
    };
    r.end()?;
    Ok(request)
}

fn read_connection(r: &mut Reader<'_>) -> anyhow::Result<Connection> {
    Ok(Connection { id: r.str()?, details: r.data()? })
}

fn read_schedule(r: &mut Reader<'_>) -> anyhow::Result<Schedule> {
    Ok(Schedule {
        id: r.str()?,
        name: r.opt(Reader::str)?,
        kind: r.str()?,
        action: r.str()?,
        args: r.data()?,
        next_run_at: r.uint()?,
        last_run_at: r.opt(Reader::uint)?,
        expression: r.opt(Reader::str)?,
        timezone: r.opt(Reader::str)?,
        interval_ms: r.opt(Reader::uint)?,
        max_history: r.opt(Reader::uint)?,
    })
}

fn read_fire(r: &mut Reader<'_>) -> anyhow::Result<ScheduleFire> {
    Ok(ScheduleFire {
        action: r.str()?,
        scheduled_at: r.uint()?,
        fired_at: r.uint()?,
        finished_at: r.opt(Reader::uint)?,
        result: r.str()?,
        error: r.opt(|r| {
            Ok(ScheduleError { group: r.str()?, code: r.str()?, message: r.str()?, metadata: r.opt(Reader::data)? })
        })?,
    })
}

fn read_init(r: &mut Reader<'_>) -> anyhow::Result<Init> {
    Ok(Init {
        connections: r.list(read_connection)?,
        state: r.opt(Reader::data)?,
        is_state_enabled: r.bool()?,
        rpcs: r.list(Reader::str)?,
        is_database_enabled: r.bool()?,
        queue_size: r.uint()?,
        workflow_history: r.opt(Reader::data)?,
        is_workflow_enabled: r.bool()?,
        tab_config: r.list(|r| {
            Ok(TabConfigEntry {
                id: r.str()?,
                label: r.opt(Reader::str)?,
                icon: r.opt(Reader::str)?,
                hidden: r.bool()?,
            })
        })?,
        schedules: r.list(read_schedule)?,
    })
}

/// Reads one version 6 message frame (`encodeInspectorResponse`'s input).
pub fn decode_message(bytes: &[u8]) -> anyhow::Result<Message> {
    let mut r = Reader(bytes);
    let tag = r.uint()?;
    let message = match tag {
        0 => Message::State { rid: r.uint()?, state: r.opt(Reader::data)?, is_state_enabled: r.bool()? },
        1 => Message::Connections { rid: r.uint()?, connections: r.list(read_connection)? },
        2 => Message::Action { rid: r.uint()?, output: r.data()? },
        3 => Message::ConnectionsUpdated { connections: r.list(read_connection)? },
        4 => Message::QueueUpdated { queue_size: r.uint()? },
        5 => Message::StateUpdated { state: r.data()? },
        6 => Message::WorkflowHistoryUpdated { history: r.data()? },
        7 => Message::SchedulesUpdated { schedules: r.list(read_schedule)? },
        8 => Message::Rpcs { rid: r.uint()?, rpcs: r.list(Reader::str)? },
        9 => Message::TraceQuery { rid: r.uint()?, payload: r.data()? },
        10 => Message::Queue {
            rid: r.uint()?,
            status: QueueStatus {
                size: r.uint()?,
                max_size: r.uint()?,
                messages: r
                    .list(|r| Ok(QueueMessageSummary { id: r.uint()?, name: r.str()?, created_at_ms: r.uint()? }))?,
                truncated: r.bool()?,
            },
        },
        11 => {
            Message::WorkflowHistory { rid: r.uint()?, history: r.opt(Reader::data)?, is_workflow_enabled: r.bool()? }
        }
        12 => Message::WorkflowReplay { rid: r.uint()?, history: r.opt(Reader::data)?, is_workflow_enabled: r.bool()? },
        13 => Message::Schedules { rid: r.uint()?, schedules: r.list(read_schedule)? },
        14 => Message::ScheduleHistory { rid: r.uint()?, schedule_id: r.str()?, history: r.list(read_fire)? },
        15 => Message::ScheduleDelete { rid: r.uint()?, schedule_id: r.str()?, deleted: r.bool()? },
        16 => Message::Error { message: r.str()? },
        17 => Message::Init(Box::new(read_init(&mut r)?)),
        18 => Message::DatabaseSchema { rid: r.uint()?, schema: r.data()? },
        19 => Message::DatabaseTableRows { rid: r.uint()?, result: r.data()? },
        tag => anyhow::bail!("unknown message kind {tag}"),
    };
    r.end()?;
    Ok(message)
}

// --- writing ---------------------------------------------------------------

#[derive(Default)]
pub(super) struct Writer(pub(super) Vec<u8>);

impl Writer {
    pub(super) fn uint(&mut self, mut value: u64) -> &mut Self {
        while value >= 0x80 {
            self.0.push((value as u8) | 0x80);
            value >>= 7;
        }
        self.0.push(value as u8);
        self
    }
    pub(super) fn data(&mut self, bytes: &[u8]) -> &mut Self {
        self.uint(bytes.len() as u64);
        self.0.extend_from_slice(bytes);
        self
    }
    pub(super) fn str(&mut self, value: &str) -> &mut Self {
        self.data(value.as_bytes())
    }
    pub(super) fn bool(&mut self, value: bool) -> &mut Self {
        self.0.push(u8::from(value));
        self
    }
    fn opt<T: ?Sized>(&mut self, value: Option<&T>, write: impl FnOnce(&mut Self, &T)) -> &mut Self {
        match value {
            Some(value) => {
                self.bool(true);
                write(self, value);
            }
            None => {
                self.bool(false);
            }
        }
        self
    }
    pub(super) fn opt_data(&mut self, value: Option<&[u8]>) -> &mut Self {
        self.opt(value, |w, v| {
            w.data(v);
        })
    }
    fn opt_str(&mut self, value: Option<&str>) -> &mut Self {
        self.opt(value, |w, v| {
            w.str(v);
        })
    }
    fn opt_uint(&mut self, value: Option<u64>) -> &mut Self {
        self.opt(value.as_ref(), |w, v| {
            w.uint(*v);
        })
    }
    fn list<T>(&mut self, items: &[T], mut write: impl FnMut(&mut Self, &T)) -> &mut Self {
        self.uint(items.len() as u64);
        for item in items {
            write(self, item);
        }
        self
    }
    pub(super) fn connections(&mut self, connections: &[Connection]) -> &mut Self {
        self.list(connections, |w, c| {
            w.str(&c.id).data(&c.details);
        })
    }
    pub(super) fn strs(&mut self, values: &[String]) -> &mut Self {
        self.list(values, |w, s| {
            w.str(s);
        })
    }
    pub(super) fn tabs(&mut self, tabs: &[TabConfigEntry]) -> &mut Self {
        self.list(tabs, |w, t| {
            w.str(&t.id).opt_str(t.label.as_deref()).opt_str(t.icon.as_deref()).bool(t.hidden);
        })
    }
    fn schedules(&mut self, schedules: &[Schedule]) -> &mut Self {
        self.list(schedules, |w, s| {
            w.str(&s.id).opt_str(s.name.as_deref()).str(&s.kind).str(&s.action).data(&s.args);
            w.uint(s.next_run_at).opt_uint(s.last_run_at).opt_str(s.expression.as_deref());
            w.opt_str(s.timezone.as_deref()).opt_uint(s.interval_ms).opt_uint(s.max_history);
        })
    }
    fn fires(&mut self, fires: &[ScheduleFire]) -> &mut Self {
        self.list(fires, |w, f| {
            w.str(&f.action).uint(f.scheduled_at).uint(f.fired_at).opt_uint(f.finished_at).str(&f.result);
            w.opt(f.error.as_ref(), |w, e| {
                w.str(&e.group).str(&e.code).str(&e.message).opt_data(e.metadata.as_deref());
            });
        })
    }
}

/// Writes the body of `message` (everything after the union tag) as version
/// 6 has it; `Init`'s body depends on the version and is written by the
/// caller ([`super::versions`]).
pub(super) fn write_body(w: &mut Writer, message: &Message) {
    match message {
        Message::State { rid, state, is_state_enabled } => {
            w.uint(*rid).opt_data(state.as_deref()).bool(*is_state_enabled);
        }
        Message::Connections { rid, connections } => {
            w.uint(*rid).connections(connections);
        }
        Message::Action { rid, output } => {
            w.uint(*rid).data(output);
        }
        Message::ConnectionsUpdated { connections } => {
            w.connections(connections);
        }
        Message::QueueUpdated { queue_size } => {
            w.uint(*queue_size);
        }
        Message::StateUpdated { state } => {
            w.data(state);
        }
        Message::WorkflowHistoryUpdated { history } => {
            w.data(history);
        }
        Message::SchedulesUpdated { schedules } => {
            w.schedules(schedules);
        }
        Message::Rpcs { rid, rpcs } => {
            w.uint(*rid).strs(rpcs);
        }
        Message::TraceQuery { rid, payload } => {
            w.uint(*rid).data(payload);
        }
        Message::Queue { rid, status } => {
            w.uint(*rid).uint(status.size).uint(status.max_size);
            w.list(&status.messages, |w, m| {
                w.uint(m.id).str(&m.name).uint(m.created_at_ms);
            });
            w.bool(status.truncated);
        }
        Message::WorkflowHistory { rid, history, is_workflow_enabled }
        | Message::WorkflowReplay { rid, history, is_workflow_enabled } => {
            w.uint(*rid).opt_data(history.as_deref()).bool(*is_workflow_enabled);
        }
        Message::Schedules { rid, schedules } => {
            w.uint(*rid).schedules(schedules);
        }
        Message::ScheduleHistory { rid, schedule_id, history } => {
            w.uint(*rid).str(schedule_id).fires(history);
        }
        Message::ScheduleDelete { rid, schedule_id, deleted } => {
            w.uint(*rid).str(schedule_id).bool(*deleted);
        }
        Message::Error { message } => {
            w.str(message);
        }
        Message::Init(init) => {
            write_init(w, init, VERSION);
        }
        Message::DatabaseSchema { rid, schema } => {
            w.uint(*rid).data(schema);
        }
        Message::DatabaseTableRows { rid, result } => {
            w.uint(*rid).data(result);
        }
    }
}

/// `Init` as `version` has it: version 1 has an (always empty) event list
/// after the connections and ends at `isDatabaseEnabled`; versions 2-4 end
/// at `isWorkflowEnabled`; 5 adds the tabs; 6 the schedules.
pub(super) fn write_init(w: &mut Writer, init: &Init, version: u16) {
    w.connections(&init.connections);
    if version == 1 {
        w.uint(0);
    }
    w.opt_data(init.state.as_deref()).bool(init.is_state_enabled).strs(&init.rpcs).bool(init.is_database_enabled);
    if version == 1 {
        return;
    }
    w.uint(init.queue_size).opt_data(init.workflow_history.as_deref()).bool(init.is_workflow_enabled);
    if version >= 5 {
        w.tabs(&init.tab_config);
    }
    if version >= 6 {
        w.schedules(&init.schedules);
    }
}

/// The version 6 union tag of `message`.
pub(super) fn tag(message: &Message) -> u64 {
    match message {
        Message::State { .. } => 0,
        Message::Connections { .. } => 1,
        Message::Action { .. } => 2,
        Message::ConnectionsUpdated { .. } => 3,
        Message::QueueUpdated { .. } => 4,
        Message::StateUpdated { .. } => 5,
        Message::WorkflowHistoryUpdated { .. } => 6,
        Message::SchedulesUpdated { .. } => 7,
        Message::Rpcs { .. } => 8,
        Message::TraceQuery { .. } => 9,
        Message::Queue { .. } => 10,
        Message::WorkflowHistory { .. } => 11,
        Message::WorkflowReplay { .. } => 12,
        Message::Schedules { .. } => 13,
        Message::ScheduleHistory { .. } => 14,
        Message::ScheduleDelete { .. } => 15,
        Message::Error { .. } => 16,
        Message::Init(_) => 17,
        Message::DatabaseSchema { .. } => 18,
        Message::DatabaseTableRows { .. } => 19,
    }
}

/// Writes one version 6 message frame.
pub fn encode_message(message: &Message) -> Vec<u8> {
    let mut w = Writer::default();
    w.uint(tag(message));
    write_body(&mut w, message);
    w.0
}

#[cfg(test)]
#[path = "wire_tests.rs"]
mod tests;
