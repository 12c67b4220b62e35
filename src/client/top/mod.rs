//! `eukhe top`: the terminal loop around the dashboard's state (`state`)
//! and its drawing (`view`). A background client: it never replaces a
//! daemon; it redraws on events and keys, and once a second so elapsed
//! times tick. The terminal is restored on quit, on error and on panic.

mod state;
mod view;

use std::io::{IsTerminal, Stdout};
use std::process::ExitCode;
use std::time::Duration;

use crossterm::event::{
    self as term_event, Event as TermEvent, KeyCode, KeyEventKind, KeyModifiers,
};
use crossterm::terminal::{
    disable_raw_mode, enable_raw_mode, EnterAlternateScreen, LeaveAlternateScreen,
};
use crossterm::{cursor, execute};
use ratatui::backend::CrosstermBackend;
use ratatui::Terminal;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

use super::cli::unexpected;
use super::connect::{connect, connect_background_existing, Client};
use super::error::ClientError;
use super::events::subscribe;
use crate::clock::wall_ms;
use crate::laws::replace::ClientStart;
use crate::laws::timing::{EVENTS_RECONNECT_MS, TOP_KEY_POLL_MS, TOP_TICK_MS};
use crate::protocol::event::Event;
use crate::protocol::message::{Request, Response, SessionRequest};
use crate::session::transcript::Entry;
use state::{Command, Dashboard, Key};

/// How often the key reader looks whether it is paused (an attach has
/// the terminal).
const KEY_POLL: Duration = Duration::from_millis(TOP_KEY_POLL_MS);

/// `eukhe top`: the dashboard on this terminal until the person quits.
pub async fn top() -> Result<ExitCode, ClientError> {
    if !std::io::stdout().is_terminal() || !std::io::stdin().is_terminal() {
        return Err(ClientError::Usage(
            "top needs a terminal (use `eukhe events` in a pipe)".into(),
        ));
    }
    // Subscribed before the first `ls`: nothing that happens after the
    // listing is missed.
    let mut stream = Some(subscribe(connect(ClientStart::Top).await?, &None).await?);
    let mut dashboard = first_dashboard().await?;
    let mut screen = Screen::enter()?;
    let mut keys = KeyReader::spawn();
    loop {
        screen.draw(&dashboard)?;
        tokio::select! {
            input = keys.inputs.recv() => {
                let Some(input) = input else { return Ok(ExitCode::SUCCESS) };
                let Input::Key(key) = input else { continue };
                let command = dashboard.key(key);
                // Whatever a daemon connection printed meanwhile (a note
                // about its build) is wiped by a full redraw.
                let acted = command != Command::Nothing;
                match command {
                    Command::Nothing => {}
                    Command::Quit => break,
                    Command::Attach(id) => {
                        dashboard.message = attach_here(&id, &dashboard, &mut screen, &mut keys).await?;
                    }
                    Command::Cancel(id) => dashboard.message = cancel(&dashboard, &id).await,
                    Command::Restart(id) => dashboard.message = restart(&dashboard, &id).await,
                    Command::Remove(id) => dashboard.message = remove(&dashboard, &id).await,
                }
                if acted {
                    screen.clear();
                }
            }
            event = next_event(&mut stream) => match event {
                Some(event) => dashboard.apply(&event),
                None => {
                    stream = None;
                    dashboard.connected = false;
                }
            },
            _ = tokio::time::sleep(Duration::from_millis(TOP_TICK_MS)), if stream.is_some() => {}
            _ = tokio::time::sleep(Duration::from_millis(EVENTS_RECONNECT_MS)), if stream.is_none() => {
                stream = resubscribe(&mut dashboard).await;
            }
        }
    }
    drop(screen);
    Ok(ExitCode::SUCCESS)
}

/// The dashboard as the daemon lists its sessions now, with the run and
/// queue that each busy session's last entries show.
async fn first_dashboard() -> Result<Dashboard, ClientError> {
    let (sessions, status) = listing().await?;
    let mut dashboard = Dashboard::new(&sessions, &status);
    for info in sessions.iter().filter(|info| info.state == "busy") {
        if let Ok(entries) = tail(&info.id).await {
            dashboard.seen_in_tail(&info.id, &entries);
        }
    }
    Ok(dashboard)
}

/// Back on the next daemon, if one listens now (never starting or
/// replacing one): listed afresh, since events in between were missed.
/// None while none listens, or while it cannot be followed and listed.
async fn resubscribe(dashboard: &mut Dashboard) -> Option<Client> {
    let client = connect_background_existing().await.ok()??;
    let client = subscribe(client, &None).await.ok()?;
    let (sessions, status) = listing().await.ok()?;
    dashboard.relist(&sessions, &status);
    dashboard.message = "the daemon restarted: listed afresh".into();
    Some(client)
}

/// Hand the terminal to an attach of session `id` and take it back once
/// the person detaches: the line saying how the attach ended.
async fn attach_here(
    id: &str,
    dashboard: &Dashboard,
    screen: &mut Screen,
    keys: &mut KeyReader,
) -> Result<String, ClientError> {
    keys.pause();
    screen.leave();
    let attached = attach(id).await;
    *screen = Screen::enter()?;
    keys.resume();
    Ok(match attached {
        Ok(_) => format!("detached from {}", name(dashboard, id)),
        Err(e) => e.to_string(),
    })
}

/// Attach to session `id` until the person detaches: `eukhe attach` (the
/// same `client::attach`) as a child on this terminal, so its reading of
/// standard input ends with it and no key meant for the dashboard is
/// taken. Ctrl-C and Ctrl-\ reach the whole foreground group: this
/// process catches them (and lets them pass) while the child decides.
async fn attach(id: &str) -> Result<(), ClientError> {
    use tokio::signal::unix::{signal, SignalKind};
    let _interrupts =
        signal(SignalKind::interrupt()).map_err(ClientError::system("cannot catch Ctrl-C"))?;
    let _quits = signal(SignalKind::quit()).map_err(ClientError::system("cannot catch Ctrl-\\"))?;
    let exe =
        std::env::current_exe().map_err(ClientError::system("cannot find the eukhe executable"))?;
    let status = tokio::process::Command::new(exe)
        .args(["attach", id])
        .status()
        .await
        .map_err(ClientError::system(format!("cannot attach to {id}")))?;
    if status.success() {
        Ok(())
    } else {
        Err(ClientError::Ended {
            what: format!("attaching to {id}"),
            status,
        })
    }
}

/// The next event on the stream; none once it is lost (and forever
/// pending without one).
async fn next_event(stream: &mut Option<Client>) -> Option<Event> {
    let Some(client) = stream else {
        return std::future::pending().await;
    };
    match client.receive().await {
        Ok(Response::Event(event)) => Some(event),
        _ => None,
    }
}

/// The last `TAIL_ENTRIES` entries of session `id`'s transcript.
async fn tail(id: &str) -> Result<Vec<Entry>, ClientError> {
    let mut client = connect(ClientStart::Top).await?;
    client
        .send(&Request::Session {
            session: id.to_string(),
            request: SessionRequest::Log {
                tail: Some(TAIL_ENTRIES),
                input: None,
                after: None,
                follow: false,
            },
        })
        .await?;
    let mut entries = Vec::new();
    loop {
        match client.receive().await? {
            Response::Entry(entry) => entries.push(entry),
            Response::Replayed => return Ok(entries),
            other => return unexpected(other),
        }
    }
}

/// How many of a busy session's last entries `top` reads at its start to
/// find the run it is running and its queue.
const TAIL_ENTRIES: u64 = 200;

/// `ls` and `status`, from a daemon that listens now.
async fn listing() -> Result<
    (
        Vec<crate::protocol::message::SessionInfo>,
        crate::protocol::message::StatusInfo,
    ),
    ClientError,
> {
    let sessions = match connect(ClientStart::Top).await?.ask(Request::List).await? {
        Response::Sessions { sessions } => sessions,
        other => return unexpected(other),
    };
    let status = match connect(ClientStart::Top)
        .await?
        .ask(Request::Status)
        .await?
    {
        Response::Status(status) => status,
        other => return unexpected(other),
    };
    Ok((sessions, status))
}

/// A daemon's answer other than the one a key asked for, as the
/// dashboard's message line.
fn answer(response: Response) -> String {
    ClientError::answer(response).to_string()
}

fn name(dashboard: &Dashboard, id: &str) -> String {
    dashboard
        .rows
        .get(id)
        .map_or_else(|| id.to_string(), |row| row.name.clone())
}

async fn ask(request: Request) -> Result<Response, ClientError> {
    connect(ClientStart::Top).await?.ask(request).await
}

async fn cancel(dashboard: &Dashboard, id: &str) -> String {
    let name = name(dashboard, id);
    let request = Request::Session {
        session: id.to_string(),
        request: SessionRequest::Cancel { all: false },
    };
    match ask(request).await {
        Ok(Response::Cancelled { run, bash, .. }) => {
            let mut what: Vec<String> = run.iter().map(|run| format!("run {run}")).collect();
            what.extend(bash.iter().map(|number| format!("bash {number}")));
            if what.is_empty() {
                format!("{name} runs nothing to cancel")
            } else {
                format!("cancelling {} of {name}", what.join(", "))
            }
        }
        Ok(other) => answer(other),
        Err(e) => e.to_string(),
    }
}

async fn restart(dashboard: &Dashboard, id: &str) -> String {
    let name = name(dashboard, id);
    match ask(Request::Restart {
        session: id.to_string(),
    })
    .await
    {
        Ok(Response::Ok) => format!("{name} started afresh"),
        Ok(other) => answer(other),
        Err(e) => e.to_string(),
    }
}

async fn remove(dashboard: &Dashboard, id: &str) -> String {
    let name = name(dashboard, id);
    match ask(Request::Remove {
        session: id.to_string(),
        force: false,
    })
    .await
    {
        Ok(Response::Removed { .. }) => format!("{name} removed"),
        Ok(other) => answer(other),
        Err(e) => e.to_string(),
    }
}

/// What the key reader hands the loop.
enum Input {
    Key(Key),
    /// The terminal changed size: draw again.
    Resize,
}

/// Reads the terminal's keys on a thread of its own (crossterm reads
/// block), pausing while an attach has the terminal.
struct KeyReader {
    inputs: UnboundedReceiver<Input>,
    /// Tells the reader to pause (`true`) or go on (`false`).
    control: std::sync::mpsc::Sender<bool>,
    /// The reader answers a pause once it is between reads: the attach
    /// gets every key.
    resting: std::sync::mpsc::Receiver<()>,
}

impl KeyReader {
    fn spawn() -> KeyReader {
        let (tx, inputs) = unbounded_channel();
        let (control, control_rx) = std::sync::mpsc::channel::<bool>();
        let (rested, resting) = std::sync::mpsc::channel();
        std::thread::spawn(move || loop {
            if let Ok(true) = control_rx.try_recv() {
                if rested.send(()).is_err() {
                    return;
                }
                // Paused: blocked until told to go on (or the top ends).
                loop {
                    match control_rx.recv() {
                        Ok(false) => break,
                        Ok(true) if rested.send(()).is_ok() => continue,
                        _ => return,
                    }
                }
            }
            // Nothing wakes a terminal poll when a pause is asked: its
            // deadline (KEY_POLL) bounds how long the pause waits.
            let input = match term_event::poll(KEY_POLL) {
                Ok(true) => match term_event::read() {
                    Ok(TermEvent::Key(key)) if key.kind != KeyEventKind::Release => {
                        translate(key.code, key.modifiers).map(Input::Key)
                    }
                    Ok(TermEvent::Resize(..)) => Some(Input::Resize),
                    Ok(_) => None,
                    Err(_) => return,
                },
                Ok(false) => None,
                Err(_) => return,
            };
            if let Some(input) = input {
                if tx.send(input).is_err() {
                    return;
                }
            } else if tx.is_closed() {
                return;
            }
        });
        KeyReader {
            inputs,
            control,
            resting,
        }
    }

    /// Stop reading keys (within one poll) before someone else reads them.
    fn pause(&mut self) {
        if self.control.send(true).is_ok() {
            // The reader answers within one poll; one that ended drops its
            // sender, which ends this wait too.
            let _ = self.resting.recv();
        }
    }

    fn resume(&mut self) {
        let _ = self.control.send(false);
    }
}

fn translate(code: KeyCode, modifiers: KeyModifiers) -> Option<Key> {
    Some(match code {
        // Raw mode turns Ctrl-C into a key: it quits, as a person expects.
        KeyCode::Char('c') if modifiers.contains(KeyModifiers::CONTROL) => Key::Char('q'),
        KeyCode::Char(c) => Key::Char(c),
        KeyCode::Up => Key::Up,
        KeyCode::Down => Key::Down,
        KeyCode::Enter => Key::Enter,
        KeyCode::Esc => Key::Escape,
        KeyCode::Backspace => Key::Backspace,
        _ => return None,
    })
}

/// The dashboard's screen: raw mode and the alternate screen while it
/// lives; the terminal as it was once it is dropped, or on a panic.
struct Screen {
    terminal: Terminal<CrosstermBackend<Stdout>>,
    active: bool,
}

impl Screen {
    fn enter() -> Result<Screen, ClientError> {
        static HOOKED: std::sync::Once = std::sync::Once::new();
        HOOKED.call_once(|| {
            let earlier = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                restore_terminal();
                earlier(info);
            }));
        });
        let failed = || ClientError::system("cannot set up the terminal");
        enable_raw_mode().map_err(failed())?;
        let mut stdout = std::io::stdout();
        if let Err(e) = execute!(stdout, EnterAlternateScreen, cursor::Hide) {
            restore_terminal();
            return Err(failed()(e));
        }
        let terminal = Terminal::new(CrosstermBackend::new(stdout)).map_err(|e| {
            restore_terminal();
            failed()(e)
        })?;
        Ok(Screen {
            terminal,
            active: true,
        })
    }

    fn draw(&mut self, dashboard: &Dashboard) -> Result<(), ClientError> {
        let now = wall_ms();
        self.terminal
            .draw(|frame| view::draw(frame, dashboard, now))
            .map(|_| ())
            .map_err(ClientError::system("cannot draw on the terminal"))
    }

    /// Draw everything afresh at the next draw.
    fn clear(&mut self) {
        let _ = self.terminal.clear();
    }

    /// Give the terminal back as it was.
    fn leave(&mut self) {
        if std::mem::take(&mut self.active) {
            restore_terminal();
        }
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        self.leave();
    }
}

fn restore_terminal() {
    let _ = disable_raw_mode();
    let _ = execute!(std::io::stdout(), LeaveAlternateScreen, cursor::Show);
}
